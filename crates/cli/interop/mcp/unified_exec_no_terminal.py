"""Drives `execseam mcp --adapter fly` (the Fly emulator's machine: process handles, no
terminals) with the official MCP Python SDK (`mcp`, pinned in requirements.txt), in one session:
`exec_command` with `tty: true` is refused with a typed `unsupported` tool error (never run on
plain pipes), and the same command without `tty` runs on pipes and reports its exit. Prints
`ok <check>` per check and `OK` last.

Codex's unified exec (openai/codex `codex-rs/core/src/tools/spec.rs`) offers `tty` as an option
of `exec_command`; a harness whose sandbox has no PTY must say so rather than hand back a command
that is not on a terminal (issue 37: "never a pipe pretending to be a terminal"). The SDK returns
a tool's failure as a result with `isError` true (mcp/types.py `CallToolResult.is_error`), which is where
the typed error is.
"""

import asyncio
import os

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

EXE = os.environ["EXECSEAM_BIN"]


async def main():
    # The emulator's exports (FLY_FLAPS_BASE_URL, FLY_API_TOKEN, FLY_APP_NAME, EXECSEAM_SANDBOX)
    # are in this process's environment; the server inherits them.
    params = StdioServerParameters(
        command=EXE, args=["mcp", "--adapter", "fly", "--root", "/tmp"], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            r = await s.call_tool("exec_command", {"cmd": "test -t 1; echo tty=$?", "tty": True})
            assert r.is_error is True, r
            err = r.structured_content["error"]
            assert (err["code"], err["kind"]) == ("exec", "unsupported"), err
            assert "terminal" in err["message"], err
            assert err["retry"]["class"] == "never", err
            print("ok exec_command tty=true on an adapter without terminals: typed unsupported", flush=True)

            r = await s.call_tool("exec_command", {"cmd": "test -t 1; echo tty=$?", "yield_time_ms": 5000})
            assert r.is_error is False, r
            out = r.structured_content
            assert out.get("exit_code") == 0 and out["output"] == "tty=1\n", out
            print("ok exec_command without tty on the same adapter: pipes, exit 0", flush=True)
    print("OK", flush=True)


asyncio.run(main())
