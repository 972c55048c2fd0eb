"""Drives `execseam mcp`'s unified exec tools with the official MCP Python SDK (`mcp`, pinned in
requirements.txt), as a Codex-trained model would: `python3 -i` on a terminal, `1+1` typed,
`2` read back, `exit()` typed, the session's end with its exit code. Prints `ok <check>` per
check and `OK` last.

The tools' names and arguments are Codex's (openai/codex `codex-rs/core/src/tools/spec.rs`:
`exec_command` requires `cmd` and takes `tty`, `workdir`, `yield_time_ms`, `max_output_tokens`;
`write_stdin` requires `session_id`, a number, and takes `chars`, `yield_time_ms`); the result
says `session_id` while the command runs and `exit_code` once it ended
(`tools/handlers/unified_exec.rs`, "Process running with session ID" / "Process exited with
code"). What a terminal does is the kernel's: the line discipline echoes what is typed (so the
output holds `1+1` then `2`), and a program on a PTY sees a terminal (`os.isatty`).
"""

import asyncio
import os

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

EXE = os.environ["EXECSEAM_BIN"]
ROOT = os.environ["MCP_ROOT"]

checks = 0


def ok(name):
    global checks
    checks += 1
    print(f"ok {name}", flush=True)


async def good(s, tool, args):
    r = await s.call_tool(tool, args)
    assert r.is_error is False, (tool, args, r)
    assert isinstance(r.structured_content, dict), (tool, r)
    return r.structured_content


async def until(s, session, want, chars=""):
    """Types `chars`, then polls the session until its output so far contains `want`."""
    seen = ""
    for i in range(40):
        r = await good(s, "write_stdin", {"session_id": session, "chars": chars if i == 0 else "", "yield_time_ms": 250})
        seen += r["output"]
        if want in seen or "exit_code" in r:
            return r, seen
    raise AssertionError((want, seen))


async def main():
    params = StdioServerParameters(command=EXE, args=["mcp", "--adapter", "local", "--root", ROOT])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            ex, ws = tools["exec_command"].input_schema, tools["write_stdin"].input_schema
            assert ex["required"] == ["cmd"], ex
            assert {"cmd", "tty", "workdir", "yield_time_ms", "max_output_tokens"} <= set(ex["properties"]), ex
            assert ws["required"] == ["session_id"], ws
            assert ws["properties"]["session_id"]["type"] == "integer", ws
            assert {"chars", "yield_time_ms"} <= set(ws["properties"]), ws
            ok("tools/list: exec_command and write_stdin with Codex's arguments")

            r = await good(s, "exec_command", {
                "cmd": "python3 -q -i -c 'import os; print(\"tty\", os.isatty(0) and os.isatty(1))'",
                "tty": True, "yield_time_ms": 2000,
            })
            assert "exit_code" not in r and isinstance(r["session_id"], int), r
            assert r["handle"], r
            session = r["session_id"]
            first = r["output"]
            if ">>> " not in first:
                _, more = await until(s, session, ">>> ")
                first += more
            assert "tty True" in first and ">>> " in first, first
            ok("exec_command: python3 -i on a terminal answers with a session and its prompt")

            r, seen = await until(s, session, "\n2", chars="1+1\r")
            assert "1+1" in seen and "2\r\n>>> " in seen, seen
            ok("write_stdin: 1+1 is echoed and 2 comes back")

            r, seen = await until(s, session, "never", chars="exit()\r")
            assert r.get("exit_code") == 0 and "session_id" not in r, r
            ok("write_stdin: exit() ends the session with its exit code")

            again = await s.call_tool("write_stdin", {"session_id": session, "chars": ""})
            assert again.is_error is True, again
            ok("the ended session is gone (a tool error, not a hang)")

            r = await good(s, "exec_command", {"cmd": "echo out; echo err >&2; exit 4", "yield_time_ms": 5000})
            assert r["exit_code"] == 4 and r["output"] == "out\n" and r["stderr"] == "err\n", r
            ok("exec_command without a tty: the exit code, stdout and stderr apart")

            r = await good(s, "exec_command", {"cmd": "head -c 100000 /dev/zero | tr '\\000' x", "max_output_tokens": 100})
            assert r["exit_code"] == 0 and r["dropped_bytes"] == 100000 - 400, r
            ok("output over max_output_tokens is cut and the dropped bytes counted")
    print("OK", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
