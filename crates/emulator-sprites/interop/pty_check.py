"""The official Sprites Python SDK (sprites-py, pinned in requirements.txt) against the Sprites
emulator in TTY mode (`tty=True`): the command gets a real pseudo-terminal of the requested size,
its output is the terminal's (binary frames, stderr merged, `\\r\\n`), stdin is typed into it, the
exit code arrives in the `{"type":"exit"}` message, and a `{"type":"resize"}` message (the SDK's
`WSCommand.resize`) resizes it. Sources: sprites-py 0.7.2 `sprites/websocket.py` (`tty`, `rows`,
`cols` query, raw binary frames in TTY, `resize`), the Sprites API docs' exec WebSocket (TTY mode,
ResizeMessage, ExitMessage), ../shared/research/fly-sprites.md §B.3.2. Prints one `ok <name>`
per check and `OK` at the end.

Environment: SPRITES_API_URL, SPRITE_TOKEN, EXECSEAM_SANDBOX (the default sprite; from the emulator).
"""

import io
import time

from sprites.exceptions import ExitError
from sprites.exec import Cmd
from sprites.loop import run_sync
from sprites.websocket import WSCommand

from common import NAME, check, client

sprite = client.sprite(NAME)

# A terminal on stdin, stdout and stderr, of the size the SDK asked for (`rows`, `cols`).
out = sprite.command(
    "sh",
    "-c",
    "test -t 0 && test -t 1 && test -t 2 && echo TTY=yes; stty size; tty",
    tty=True,
    tty_rows=30,
    tty_cols=100,
).output()
check("tty: stdin, stdout and stderr are a terminal", b"TTY=yes\r\n" in out, repr(out))
check("tty: stty size is the requested size", b"30 100\r\n" in out, repr(out))
check("tty: a pts of the sprite", b"/dev/pts/" in out, repr(out))

# The terminal merges stderr into the binary output.
out = sprite.command("sh", "-c", "echo E >&2; echo O", tty=True).output()
check("tty: stderr comes through the terminal", b"E\r\n" in out and b"O\r\n" in out, repr(out))

# Stdin is typed into the terminal (raw binary frames): the line discipline echoes it.
out = sprite.command(
    "sh", "-c", "read x; echo GOT=$x", tty=True, stdin=io.BytesIO(b"hello\n")
).output()
check("tty: stdin is typed", b"GOT=hello\r\n" in out, repr(out))
check("tty: the terminal echoes", b"hello\r\n" in out.replace(b"GOT=hello\r\n", b""), repr(out))

# The exit code arrives in the exit message.
try:
    sprite.command("sh", "-c", "exit 7", tty=True).run()
    check("tty: exit 7", False, "no ExitError")
except ExitError as e:
    check("tty: exit 7", e.exit_code() == 7, repr(e))


async def resized():
    # The foreground job gets SIGWINCH when the terminal's size changes: bash's trap prints the
    # new size and exits 0 (exit 9 if the resize never came).
    cmd = Cmd(
        sprite,
        [
            "bash",
            "-c",
            'trap "stty size; exit 0" WINCH; echo READY; for i in $(seq 200); do sleep 0.1; done; exit 9',
        ],
        tty=True,
        tty_rows=24,
        tty_cols=80,
    )
    ws = WSCommand(cmd)
    await ws.start()
    deadline = time.monotonic() + 20
    while b"READY" not in ws.get_stdout() and time.monotonic() < deadline:
        import asyncio

        await asyncio.sleep(0.05)
    await ws.resize(132, 43)
    code = await ws.wait()
    await ws.close()
    return code, ws.get_stdout()


code, out = run_sync(resized(), timeout=60)
check("tty: resize delivers SIGWINCH", code == 0, repr((code, out)))
check("tty: resize sets the size", b"43 132\r\n" in out, repr(out))
print("OK", flush=True)
