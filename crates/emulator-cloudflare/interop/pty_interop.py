"""The bridge's terminal WebSocket (`GET /v1/sandbox/{id}/pty`) against clients no one here wrote.

1. openai-agents' Shell capability, invoked the way the agent runtime invokes a function tool
   (`agents.tool.invoke_function_tool` with a `ToolContext` and the model's JSON arguments, as
   `agents/run_internal/tool_actions.py` does): `exec_command` always opens the PTY socket on a
   Cloudflare session (`agents/sandbox/capabilities/tools/shell_tool.py` `ExecCommandTool._run`,
   `supports_pty()` is True in `agents/extensions/sandbox/cloudflare/sandbox.py`), waits for
   `{"type":"ready"}`, types `<command>\\n` as a binary frame and collects binary output
   (`pty_exec_start`, `_pump_ws_output`); `write_stdin` sends keystrokes on that socket
   (`pty_write_stdin`).
2. aiohttp (the client's own WebSocket stack) for the frames the tool does not use: resize, the
   error status messages, the replay of buffered output to a new connection, the bridge's 400s.

What the real service does, from its source (bridge @cloudflare/sandbox 0.12.10
`dist/bridge/index.js` route `/v1/sandbox/:id/pty` and `proxyTerminal`; container 0.12.7
`packages/sandbox-container/src/handlers/pty-ws-handler.ts`, `src/pty.ts`,
`src/services/session-manager.ts` `getPty`): one bash per session on a real pseudo-terminal,
shared by every connection of that session, its last 256 KiB of output replayed to a new
connection before `ready`; no `exit` frame is ever sent (the handler has no exit path), so the
tool reports a running process, never an exit code.

Environment: CLOUDFLARE_SANDBOX_WORKER_URL and CLOUDFLARE_SANDBOX_API_KEY. Prints one `ok <what>`
line per check; any failure raises.
"""

import asyncio
import json
import os
import re

import aiohttp
from agents.extensions.sandbox.cloudflare import (
    CloudflareSandboxClient,
    CloudflareSandboxClientOptions,
)
from agents.sandbox.capabilities.shell import Shell
from agents.sandbox.workspace_paths import SandboxWorkspaceScope
from agents.tool import invoke_function_tool
from agents.tool_context import ToolContext


def ok(what):
    print(f"ok {what}", flush=True)


def check(cond, what, detail=""):
    if not cond:
        raise AssertionError(f"{what}: {detail!r}")
    ok(what)


CALLS = 0


async def call(tool, **args):
    """One tool call as the runtime makes it: JSON arguments through `invoke_function_tool`."""
    global CALLS
    CALLS += 1
    raw = json.dumps(args)
    ctx = ToolContext(
        context=None, tool_name=tool.name, tool_call_id=f"call_{CALLS}", tool_arguments=raw
    )
    return await invoke_function_tool(function_tool=tool, context=ctx, arguments=raw)


def session_id_of(text):
    m = re.search(r"Process running with session ID (\d+)", text)
    return int(m.group(1)) if m else None


async def frames(ws, until, timeout=10.0):
    """Binary output (decoded) and text frames until `until(output)` holds or time runs out."""
    out, texts = b"", []
    deadline = asyncio.get_running_loop().time() + timeout
    while not until(out.decode("utf-8", "replace")):
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            break
        try:
            msg = await ws.receive(timeout=left)
        except asyncio.TimeoutError:
            break
        if msg.type == aiohttp.WSMsgType.BINARY:
            out += msg.data
        elif msg.type == aiohttp.WSMsgType.TEXT:
            texts.append(json.loads(msg.data))
        else:
            texts.append({"closed": str(msg.type)})
            break
    return out.decode("utf-8", "replace"), texts


async def main():
    url = os.environ["CLOUDFLARE_SANDBOX_WORKER_URL"]
    key = os.environ["CLOUDFLARE_SANDBOX_API_KEY"]
    client = CloudflareSandboxClient(exec_timeout_s=30, request_timeout_s=30)
    session = await client.create(options=CloudflareSandboxClientOptions(worker_url=url))
    await session.start()
    sandbox_id = session._inner.state.sandbox_id

    shell = Shell()
    shell.bind(session)
    shell.bind_workspace_scope(SandboxWorkspaceScope())
    tools = {t.name: t for t in shell.tools()}
    check(
        sorted(tools) == ["exec_command", "write_stdin"],
        "the Shell capability offers exec_command and write_stdin (supports_pty)",
        sorted(tools),
    )
    exec_command, write_stdin = tools["exec_command"], tools["write_stdin"]

    # A command through the tool: typed into the session's shell on the PTY. The typed line is
    # echoed as typed; only running it prints 42. A terminal turns \n into \r\n.
    # The tool waits its whole yield_time_ms (no exit frame ends it); the yields are generous
    # because the machine running the suite may be loaded (the first call also starts bash).
    r = await call(exec_command, cmd="echo pty-$((6*7))", yield_time_ms=5000)
    print(f"exec_command answered: {r!r}", flush=True)
    check("pty-42\r\n" in r, "exec_command runs the command on a terminal (output with CRLF)", r)
    check(
        session_id_of(r) is not None and "Process exited" not in r,
        "the real container sends no exit frame: the tool reports a running session",
        r,
    )

    r = await call(exec_command, cmd="tty; test -t 0 && echo stdin-is-a-tty", yield_time_ms=3000)
    check(
        re.search(r"/dev/pts/\d+", r) is not None and "stdin-is-a-tty" in r,
        "the command's stdin is a pseudo-terminal (/dev/pts/N)",
        r,
    )

    r = await call(exec_command, cmd="pwd; echo TERM=$TERM", yield_time_ms=3000)
    check(
        "/workspace\r\n" in r and "TERM=xterm-256color" in r,
        "the default session's terminal starts in /workspace with TERM=xterm-256color",
        r,
    )

    # write_stdin: keystrokes to a command started with tty=true.
    r = await call(
        exec_command, cmd="read line; echo got:$line", tty=True, yield_time_ms=1000
    )
    sid = session_id_of(r)
    check(sid is not None and "got:" not in r.replace("echo got:$line", ""), "a tty command waiting for input stays running", r)
    r = await call(write_stdin, session_id=sid, chars="hello\n", yield_time_ms=3000)
    check("got:hello" in r, "write_stdin's keystrokes reach the command", r)

    # Ctrl-C through the terminal's line discipline interrupts the foreground command.
    r = await call(exec_command, cmd="sleep 60; echo not-interrupted", tty=True, yield_time_ms=500)
    sid = session_id_of(r)
    check(sid is not None, "a long tty command is running", r)
    r = await call(write_stdin, session_id=sid, chars="\u0003", yield_time_ms=500)
    r = await call(write_stdin, session_id=sid, chars="echo after-$((1+1))\n", yield_time_ms=3000)
    check(
        "after-2" in r and "not-interrupted" not in r,
        "Ctrl-C (\\u0003) interrupts the foreground command; the shell takes the next line",
        r,
    )
    await session._inner.pty_terminate_all()

    # The raw socket, with aiohttp as the client uses it.
    base = url.replace("http://", "ws://").rstrip("/")
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        # The bridge's own answers before any upgrade.
        async with http.get(f"{url}/v1/sandbox/{sandbox_id}/pty") as resp:
            body = await resp.json()
            check(
                resp.status == 400
                and body == {"error": "WebSocket upgrade required", "code": "invalid_request"},
                "without Upgrade: 400 WebSocket upgrade required",
                (resp.status, body),
            )
        try:
            await http.ws_connect(f"{base}/v1/sandbox/{sandbox_id}/pty?cols=wide")
            raise AssertionError("cols=wide was accepted")
        except aiohttp.WSServerHandshakeError as e:
            check(e.status == 400, "cols that is not a number: 400 before the upgrade", e.status)

        # A named session: its creation-time cwd and env apply to its terminal.
        async with http.post(
            f"{url}/v1/sandbox/{sandbox_id}/session",
            json={"id": "ptyraw", "env": {"PTYVAR": "from-session"}},
        ) as resp:
            check(resp.status == 200, "session create", resp.status)
        path = f"{base}/v1/sandbox/{sandbox_id}/pty?cols=100&rows=30"
        ws = await http.ws_connect(path, headers={"Session-Id": "ptyraw"})
        _, texts = await frames(ws, lambda o: False, timeout=0.5)
        check(texts[:1] == [{"type": "ready"}], "a fresh terminal answers {\"type\":\"ready\"}", texts)
        await ws.send_bytes(b"stty size; echo var=$PTYVAR\n")
        out, _ = await frames(ws, lambda o: "var=from-session\r\n" in o)
        check("30 100\r\n" in out, "?cols=100&rows=30 sizes the terminal (stty size)", out)
        check("var=from-session\r\n" in out, "the session's env applies to its terminal", out)

        await ws.send_str(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
        await ws.send_bytes(b"stty size\n")
        out, _ = await frames(ws, lambda o: "43 132\r\n" in o)
        check("43 132\r\n" in out, "a resize control message resizes the terminal", out)

        await ws.send_str(json.dumps({"type": "resize", "cols": 0, "rows": 10}))
        _, texts = await frames(ws, lambda o: False, timeout=1.0)
        check(
            {"type": "error", "message": "Invalid dimensions: cols and rows must be positive"}
            in texts,
            "a non-positive resize answers an error status",
            texts,
        )
        await ws.send_str("not json")
        _, texts = await frames(ws, lambda o: False, timeout=1.0)
        check(
            {"type": "error", "message": "Invalid control message"} in texts,
            "a text frame that is not JSON answers Invalid control message",
            texts,
        )
        await ws.send_bytes(b"echo marker-$((2*21))\n")
        await frames(ws, lambda o: "marker-42\r\n" in o)
        await ws.close()

        # Reconnecting attaches to the same shell: its output so far first, then ready.
        ws = await http.ws_connect(path, headers={"Session-Id": "ptyraw"})
        first = await ws.receive(timeout=10)
        check(
            first.type == aiohttp.WSMsgType.BINARY and b"marker-42\r\n" in first.data,
            "a new connection first receives the buffered output",
            first,
        )
        second = await ws.receive(timeout=10)
        check(
            second.type == aiohttp.WSMsgType.TEXT and json.loads(second.data) == {"type": "ready"},
            "then ready",
            second,
        )
        # The shell's state is the session's one shell: what it was told persists.
        await ws.send_bytes(b"cd /tmp && X=kept\n")
        await ws.send_bytes(b"echo $X in $(pwd)\n")
        out, _ = await frames(ws, lambda o: "kept in /tmp\r\n" in o)
        check("kept in /tmp\r\n" in out, "one shell per session: cd and variables persist", out)

        # The shell exits: the container sends no exit status (pty-ws-handler.ts has none).
        await ws.send_bytes(b"exit 3\n")
        _, texts = await frames(ws, lambda o: False, timeout=1.5)
        check(
            not any(t.get("type") == "exit" for t in texts),
            "no exit frame after the shell exits (as the released container)",
            texts,
        )
        await ws.close()

    await client.delete(session)
    print("pty interop: all checks passed", flush=True)


asyncio.run(main())
