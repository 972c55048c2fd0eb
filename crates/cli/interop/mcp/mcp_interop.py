"""Drives `execseam mcp` over stdio with the official MCP Python SDK (`mcp`, pinned in
requirements.txt): initialize, tools/list with every schema, a call of every tool, a failing
command, a typed tool error and bad arguments. Prints `ok <check>` per check and `OK` last.

What is asserted is what the MCP specification (revision 2025-11-25, the newest one reached by
the initialize handshake this SDK offers: mcp_types/version.py, LATEST_HANDSHAKE_VERSION) and
the SDK say, not what our server happens to do:

- server/tools, "Error Handling": errors of a tool's execution are reported in the result with
  `isError: true`, protocol errors only for unknown tools and malformed requests; input
  validation errors are tool execution errors (SEP-1303 in that revision). The SDK's own
  CallToolResult docstring (mcp_types/_types.py) says the same. So a command that exits non-zero
  is a normal result (the issue: "a non-zero exit as a normal result"), a missing file is a
  result with `is_error`, and neither raises `MCPError` in the client.
- basic/transports, "stdio": the server MUST NOT write anything to stdout that is not a valid
  MCP message and MAY log to stderr. The server runs at RUST_LOG=trace here: if one log line
  reached stdout, the SDK's reader (mcp/client/stdio.py) would fail to parse it and the session
  would break; the log lines are checked to be on stderr.
- server/tools, "Tool": `inputSchema` is a JSON Schema object with `type: "object"`.
- JSON-RPC 2.0 §5 ("Response object") and §5.1: every request gets a response with its `id`;
  a line that cannot be parsed is answered `-32700` with the id, or null when it cannot be
  detected. The SDK pairs responses with requests by id (mcp/shared/session.py,
  `_handle_response`): an error with a null id leaves the request waiting forever, so a
  request too large for the server (issue 38: 17 MB) must be answered with its own id.
"""

import asyncio
import json
import os
import sys
import time

from mcp import types

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

EXE = os.environ["EXECSEAM_BIN"]
ROOT = os.environ["MCP_ROOT"]
ERRLOG = os.environ["MCP_ERRLOG"]
TOOLS = {"apply_patch", "bash", "bash_kill", "bash_output", "bash_release", "bash_stdin", "code", "edit", "exec_command", "glob", "grep", "list", "read", "write", "write_stdin"}

checks = 0


def ok(name):
    global checks
    checks += 1
    print(f"ok {name}", flush=True)


async def call(s, tool, args):
    r = await s.call_tool(tool, args)
    return r


async def good(s, tool, args):
    r = await call(s, tool, args)
    assert r.is_error is False, (tool, args, r)
    assert isinstance(r.structured_content, dict), (tool, r)
    # The unstructured content carries the same result as text (server/tools, "Structured
    # Content": a server returning structured content SHOULD also return it serialized).
    assert r.content and r.content[0].type == "text", (tool, r.content)
    return r.structured_content


async def tool_error(s, tool, args):
    r = await call(s, tool, args)
    assert r.is_error is True, (tool, args, r)
    return r


async def main():
    params = StdioServerParameters(
        command=EXE,
        args=["mcp", "--adapter", "local", "--root", ROOT],
        env={"RUST_LOG": "trace"},
    )
    with open(ERRLOG, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                assert init.capabilities.tools is not None, init
                ok("initialize: the server declares the tools capability")

                tools = (await s.list_tools()).tools
                assert {t.name for t in tools} == TOOLS, [t.name for t in tools]
                ok("tools/list: every builtin tool")
                for t in tools:
                    schema = t.input_schema
                    assert schema.get("type") == "object", (t.name, schema)
                    assert isinstance(schema.get("properties", {}), dict), (t.name, schema)
                    assert t.description and len(t.description) > 60, (t.name, t.description)
                ok("tools/list: object schemas and descriptions")

                w = await good(s, "write", {"path": f"{ROOT}/src/lib.rs", "content": "fn a() {}\nfn needle() {}\n"})
                assert w["bytes"] == 25, w
                ok("write")
                r = await good(s, "read", {"path": f"{ROOT}/src/lib.rs"})
                assert r["content"] == "fn a() {}\nfn needle() {}\n", r
                ok("read")
                e = await good(s, "edit", {"path": f"{ROOT}/src/lib.rs", "old": "fn a()", "new": "fn b()"})
                assert e["replacements"] == 1, e
                ok("edit")
                g = await good(s, "glob", {"pattern": "**/*.rs", "dir": ROOT})
                assert g["paths"] == ["src/lib.rs"], g
                ok("glob")
                l = await good(s, "list", {"dir": ROOT, "depth": 3})
                assert [x["path"] for x in l["entries"]] == ["src", "src/lib.rs"], l
                ok("list")
                g = await good(s, "grep", {"pattern": "needle", "dir": ROOT})
                assert [(m["path"], m["line"]) for m in g["matches"]] == [("src/lib.rs", 2)], g
                ok("grep")
                patch = "*** Begin Patch\n*** Add File: notes.md\n+# notes\n*** End Patch\n"
                p = await good(s, "apply_patch", {"patch": patch, "dir": ROOT})
                assert p["files"] == [{"path": "notes.md", "change": "created"}], p
                ok("apply_patch")
                c = await good(s, "code", {"language": "python", "source": "import sys\nprint(6 * 7)\nsys.stderr.write('e')\nsys.exit(2)"})
                assert (c["stdout"], c["stderr"], c["exit"]) == ("42\n", "e", {"code": 2}), c
                ok("code: stdout, stderr and exit apart; a non-zero exit is a result")

                # A failing command: a normal result, stdout and stderr separate.
                b = await good(s, "bash", {"script": "printf out; printf err >&2; exit 7"})
                assert (b["stdout"], b["stderr"], b["exit"]) == ("out", "err", {"code": 7}), b
                ok("bash: exit 7 is a result with is_error false, stdout and stderr separate")
                b = await good(s, "bash", {"script": "cat; printf '%s' \"$X\" >&2", "stdin": "in\n", "env": {"X": "x"}, "workdir": ROOT})
                assert (b["stdout"], b["stderr"], b["exit"]) == ("in\n", "x", {"code": 0}), b
                ok("bash: stdin, env and workdir")
                text = json.loads(await_text(await call(s, "bash", {"script": "exit 3"})))
                assert text["exit"] == {"code": 3}, text
                ok("bash: the text content is the same result")

                # A typed tool error: a result with is_error, never an MCPError.
                r = await tool_error(s, "read", {"path": f"{ROOT}/no such file"})
                assert r.structured_content["error"]["code"] == "not-found", r
                ok("read of a missing file: is_error with a typed code")
                # Bad arguments: a tool execution error (SEP-1303), and the server keeps serving.
                await tool_error(s, "read", {})
                await tool_error(s, "bash", {"script": 5})
                ok("bad arguments: is_error, not a protocol error")
                # An unknown tool is a protocol error (server/tools, "Error Handling").
                try:
                    r = await s.call_tool("no_such_tool", {})
                    raise AssertionError(f"an unknown tool answered a result: {r}")
                except MCPError as e:
                    # -32602 (invalid params) is the spec's example code for an unknown tool.
                    assert e.error.code == -32602, e.error
                ok("unknown tool: a protocol error (-32602), not a result")
                l = await good(s, "list", {"dir": ROOT, "depth": 3})
                assert len(l["entries"]) == 3, l
                ok("the server still serves after the errors")

                # apply_patch never leaves its root through a symlink (issue 38).
                outside = ROOT + ".outside"
                os.makedirs(outside, exist_ok=True)
                os.symlink(outside, f"{ROOT}/link")
                patch = "*** Begin Patch\n*** Add File: link/pwn-patch3\n+pwned\n*** End Patch\n"
                r = await tool_error(s, "apply_patch", {"patch": patch, "dir": ROOT})
                assert r.structured_content["error"]["code"] == "outside-root", r
                assert os.listdir(outside) == [], os.listdir(outside)
                ok("apply_patch through a symlink out of its root: outside-root, nothing written")

                # A 17 MB request: answered with its id and the limit, within a second.
                start = time.monotonic()
                try:
                    r = await s.call_tool("write", {"path": f"{ROOT}/big", "content": "x" * 17_000_000})
                    raise AssertionError(f"a 17 MB request answered a result: {r}")
                except MCPError as e:
                    assert e.error.code == -32600, e.error
                    assert "16777216" in e.error.message, e.error
                took = time.monotonic() - start
                assert took < 1.0, took
                assert not os.path.exists(f"{ROOT}/big")
                ok(f"a 17 MB request: a JSON-RPC error naming the limit, in {took:.2f} s")
                l = await good(s, "list", {"dir": ROOT, "depth": 1})
                ok("the server still serves after the oversized request")
                await background(s)
    with open(ERRLOG) as f:
        log = f.read()
    # Its spans: each tool's exec, and the sandbox created at start, destroyed at stdin EOF.
    assert "exec{" in log, log[:2000]
    assert 'lifecycle{provider="local" operation="create"' in log, log[:2000]
    sandbox = log.split('lifecycle{provider="local" operation="create" sandbox="', 1)[1].split('"', 1)[0]
    assert f"destroyed provider=\"local\" sandbox={sandbox}" in log, log[-2000:]
    ok("the server's log went to stderr, never into the protocol stream; its sandbox destroyed at EOF")
    await confined()
    await malformed_lines()
    print("OK", flush=True)


async def poll_output(s, id, until, seconds=20):
    """bash_output until `until(result)` holds (bash_output never waits: issue 34's contract)."""
    deadline = time.monotonic() + seconds
    seen = []
    while True:
        o = await good(s, "bash_output", {"id": id})
        seen.append(o)
        if until(o):
            return o, seen
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.05)


async def background(s):
    """Issue 34's background commands, in the shape of Claude Code's background shell (Bash
    `run_in_background`, then its output and kill tools): the start answers at once with an id,
    each read brings what was written since the last one, stdin and a kill reach the command."""
    script = "printf start; printf e1 >&2; IFS= read -r line; printf '<%s>' \"$line\"; exit 5"
    start = time.monotonic()
    b = await good(s, "bash", {"script": script, "run_in_background": True, "keep_stdin_open": True})
    assert b["state"] == "running" and b["id"], b
    assert time.monotonic() - start < 10, "the start waited for the command"
    ok("bash run_in_background: an id at once, the command still running")
    o, seen = await poll_output(s, b["id"], lambda o: o["next"] == {"stdout": 5, "stderr": 2})
    assert "".join(x["stdout"] for x in seen) == "start", seen
    assert "".join(x["stderr"] for x in seen) == "e1", seen
    assert o["state"] == "running" and o["exit"] is None and o["complete"] is False, o
    again = await good(s, "bash_output", {"id": b["id"]})
    assert (again["stdout"], again["stderr"], again["from"]) == ("", "", {"stdout": 5, "stderr": 2}), again
    ok("bash_output: what was written since the last read, then nothing new")
    w = await good(s, "bash_stdin", {"id": b["id"], "data": "hello\n", "close": True})
    assert (w["accepted"], w["closed"]) == (6, True), w
    # `block` waits for the command's end, as Claude Code's TaskOutput does (`block`, default
    # true there, and `timeout` in ms, 0..=600000, default 30000: its tool schema as the Claude
    # Agent SDK 0.3.168 sends it); here the default stays "never waits".
    o = await good(s, "bash_output", {"id": b["id"], "block": True, "timeout_ms": 20000})
    assert o["stdout"] == "<hello>" and o["complete"], o
    assert o["exit"] == {"code": 5} and o["state"] == "exited", o
    whole = await good(s, "bash_output", {"id": b["id"], "stdout_from": 0, "stderr_from": 0})
    assert (whole["stdout"], whole["stderr"], whole["complete"]) == ("start<hello>", "e1", True), whole
    ok("bash_stdin reaches the command; its exit 5 and its whole output from offset 0")
    # A kill reaches the command's process group: its background child dies with it.
    child = f"{ROOT}/child.pid"
    k = await good(s, "bash", {"script": f"sleep 60 & echo $! > {child}; wait", "run_in_background": True})
    deadline = time.monotonic() + 10
    while not (os.path.exists(child) and open(child).read().strip()):
        assert time.monotonic() < deadline, "the background command never wrote its child's pid"
        await asyncio.sleep(0.05)
    pid = int(open(child).read())
    r = await good(s, "bash_kill", {"id": k["id"]})
    assert (r["signal"], r["state"], r["exit"]) == ("TERM", "exited", {"code": 143}), r
    deadline = time.monotonic() + 10
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        assert time.monotonic() < deadline, f"the command's child {pid} outlived the kill"
        await asyncio.sleep(0.05)
    ok("bash_kill: TERM to the group, exit 143, its child gone too")
    # Release: a running command is refused (kill it first); an ended one is forgotten.
    r = await good(s, "bash", {"script": "sleep 0.3; printf late; sleep 30", "run_in_background": True})
    # `block_until: "output"` (ours; TaskOutput has only the wait for the end): the first output
    # past the cursor ends the wait, long before the command's end or the 20 s timeout.
    start = time.monotonic()
    o = await good(s, "bash_output", {"id": r["id"], "block": True, "timeout_ms": 20000, "block_until": "output"})
    assert o["stdout"] == "late" and o["state"] == "running", o
    assert time.monotonic() - start < 10, "block_until output waits for the output, not the end"
    start = time.monotonic()
    o = await good(s, "bash_output", {"id": r["id"], "block": True, "timeout_ms": 300})
    assert o["state"] == "running" and o["exit"] is None, o
    assert 0.25 < time.monotonic() - start < 10, "block waits up to timeout_ms"
    e = await tool_error(s, "bash_release", {"id": r["id"]})
    assert e.structured_content["error"]["kind"] == "conflict", e
    await good(s, "bash_kill", {"id": r["id"], "signal": "KILL"})
    for id in (r["id"], k["id"]):
        rel = await good(s, "bash_release", {"id": id})
        assert rel == {"id": id, "released": True}, rel
        e = await tool_error(s, "bash_output", {"id": id})
        assert e.structured_content["error"]["kind"] == "not-found", e
    ok("bash_output block waits up to timeout_ms or for new output; bash_release refuses a running command, forgets an ended one")
    # `filter`, as Claude Code's BashOutput `filter` ("Only lines matching this regex will be
    # included in the result. Any lines that do not match will no longer be available to read":
    # its published tool schema): whole lines only, so a line still being written waits for its
    # newline; the read moves past the lines that do not match.
    script = "printf 'ok 1\\nFAIL a\\nFAIL par'; sleep 0.5; printf 'tial\\nok 2\\n'; exit 1"
    f = await good(s, "bash", {"script": script, "run_in_background": True})
    early = await good(s, "bash_output", {"id": f["id"], "filter": "^FAIL", "block": True, "timeout_ms": 20000, "block_until": "output"})
    assert early["state"] == "running" and early["next"]["stdout"] in (0, 5, 12), early
    end = await good(s, "bash_output", {"id": f["id"], "filter": "^FAIL", "block": True, "timeout_ms": 20000})
    assert early["stdout"] + end["stdout"] == "FAIL a\nFAIL partial\n", (early, end)
    assert end["exit"] == {"code": 1} and end["complete"] and end["next"]["stdout"] == 30, end
    after = await good(s, "bash_output", {"id": f["id"]})
    assert (after["stdout"], after["from"]["stdout"]) == ("", 30), after
    whole = await good(s, "bash_output", {"id": f["id"], "stdout_from": 0, "stderr_from": 0})
    assert whole["stdout"] == "ok 1\nFAIL a\nFAIL partial\nok 2\n", whole
    e = await tool_error(s, "bash_output", {"id": f["id"], "filter": "(unclosed"})
    assert e.structured_content["error"]["code"] == "invalid-argument", e
    await good(s, "bash_release", {"id": f["id"]})
    ok("bash_output filter: matching whole lines only, a line in progress waits, a bad pattern refused")
    e = await tool_error(s, "bash", {"script": "true", "run_in_background": True, "timeout_secs": 5})
    assert e.structured_content["error"]["code"] == "invalid-argument", e
    e = await tool_error(s, "bash_output", {"id": "not a handle"})
    err = e.structured_content["error"]
    assert (err["code"], err["kind"]) == ("exec", "invalid-command"), e
    ok("background: a deadline is refused, a garbage id is a typed error")


async def confined():
    """`execseam mcp --confine`: every tool refuses a path through the link out of the root."""
    params = StdioServerParameters(command=EXE, args=["mcp", "--adapter", "local", "--root", ROOT, "--confine"])
    outside = ROOT + ".outside"
    with open(f"{outside}/secret", "w") as f:
        f.write("secret needle\n")
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            via = f"{ROOT}/link"
            refused = [
                ("read", {"path": f"{via}/secret"}),
                ("read", {"path": f"{outside}/secret"}),
                ("write", {"path": f"{via}/new", "content": "x"}),
                ("edit", {"path": f"{via}/secret", "old": "secret", "new": "x"}),
                ("glob", {"pattern": "**", "dir": via}),
                ("list", {"dir": via}),
                ("grep", {"pattern": "needle", "dir": via}),
                ("apply_patch", {"patch": "*** Begin Patch\n*** Add File: x\n+x\n*** End Patch\n", "dir": via}),
                ("bash", {"script": "true", "workdir": via}),
            ]
            for tool, args in refused:
                r = await tool_error(s, tool, args)
                assert r.structured_content["error"]["code"] == "outside-root", (tool, r)
            assert sorted(os.listdir(outside)) == ["secret"], os.listdir(outside)
            ok("--confine: read, write, edit, glob, list, grep, apply_patch and bash refuse the link")
            r = await good(s, "read", {"path": "src/lib.rs"})
            assert "needle" in r["content"], r
            g = await good(s, "grep", {"pattern": "needle", "dir": ROOT})
            assert [m["path"] for m in g["matches"]] == ["src/lib.rs"], g
            b = await good(s, "bash", {"script": "pwd"})
            assert b["stdout"].strip() == ROOT, b
            ok("--confine: paths inside the root work; the walks do not follow the link")


async def malformed_lines():
    """Lines that are not JSON get a -32700 with the id when there is one, within a second; the
    answers are JSON-RPC errors as the SDK's own parser reads them."""
    proc = await asyncio.create_subprocess_exec(
        EXE, "mcp", "--adapter", "local", "--root", ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )

    async def answer():
        line = await asyncio.wait_for(proc.stdout.readline(), 1.0)
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)

    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    proc.stdin.write((json.dumps(init) + "\n").encode())
    await proc.stdin.drain()
    assert (await answer()).id == 1
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    for raw, want_id in [
        (b"not json", None),
        (b'{"jsonrpc":"2.0","id":7,', 7),
        (b"\xff\xfe", None),
        (b'{"jsonrpc":"2.0","id":8,"method":"ping\x00"}', 8),
        (b'{"jsonrpc":"2.0","method":"tools/list","id":"late-id",]', "late-id"),
    ]:
        start = time.monotonic()
        proc.stdin.write(raw + b"\n")
        await proc.stdin.drain()
        m = await answer()
        assert isinstance(m, types.JSONRPCError), m
        assert m.error.code == -32700 and m.id == want_id, (raw, m)
        assert time.monotonic() - start < 1.0
    ok("malformed lines (not JSON, truncated, invalid UTF-8, NUL): -32700 with the id, within 1 s")
    proc.stdin.write(b'{"jsonrpc":"2.0","id":9,"method":"tools/list"}\n')
    await proc.stdin.drain()
    m = await answer()
    assert m.id == 9 and len(m.result["tools"]) == len(TOOLS), m
    ok("the server still serves after the malformed lines")
    proc.stdin.close()
    await asyncio.wait_for(proc.wait(), 10)


def await_text(r):
    assert r.content and r.content[0].type == "text", r
    return r.content[0].text


if __name__ == "__main__":
    asyncio.run(main())
