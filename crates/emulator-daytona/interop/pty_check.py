"""The official Daytona Python SDK's PTY sessions against the execseam Daytona emulator:
`process.create_pty_session` (the toolbox's `GET /process/pty/create-connect` WebSocket, envs in
the `X-Daytona-Pty-Envs~` subprotocol), `send_input`, `resize`, `get_pty_session_info`,
`list_pty_sessions`, `connect_pty_session`, the exit through the close frame, and `kill`.
Sources: daytona 0.226.1 `daytona/_sync/process.py`, `daytona/handle/pty_handle.py`; the daemon's
`apps/daemon/pkg/toolbox/process/pty/{controller,session,websocket,subprotocol,types}.go`.
Typed input is echoed by the terminal, so every expected line is computed by the shell.
Prints one `ok <name>` per check and "OK" at the end.
"""

import threading
import time

from daytona import Daytona, DaytonaNotFoundError
from daytona.common.pty import PtySize


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok {name}", flush=True)


class Terminal:
    """A handle's output, read on a thread through `handle.wait(on_data=...)`, and its result."""

    def __init__(self, handle):
        self.handle = handle
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.result = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        def on_data(chunk):
            with self.lock:
                self.buf.extend(chunk)

        self.result = self.handle.wait(on_data=on_data)

    def text(self):
        with self.lock:
            return self.buf.decode("utf-8", "replace")

    def wait_for(self, needle, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} not in the terminal's output: {self.text()!r}")

    def ended(self, exit_code, error):
        """Whether the handle's wait returns within 30 s with this exit code and error."""
        self.thread.join(30)
        return (
            not self.thread.is_alive()
            and self.result.exit_code == exit_code
            and self.result.error == error
        )


daytona = Daytona()
sandbox = daytona.create()
h = sandbox.process.create_pty_session(
    id="term-1", envs={"PTY_VAR": "v"}, pty_size=PtySize(rows=30, cols=100)
)
check("create_pty_session", h.session_id == "term-1" and h.is_connected(), repr(h.session_id))
term = Terminal(h)
h.send_input(
    "test -t 0 && test -t 1 && echo TTY=$((40+2)); echo SIZE=$(stty size); "
    "echo ENV=$TERM:$PTY_VAR:$(whoami):$(pwd)\n"
)
check("pty is a terminal", term.wait_for("TTY=42"))
check("pty size", term.wait_for("SIZE=30 100"))
# The daemon defaults TERM to xterm-256color and starts in its work dir as the sandbox's user.
check("pty env, user, cwd", term.wait_for("ENV=xterm-256color:v:daytona:/home/daytona"))

info = sandbox.process.get_pty_session_info("term-1")
check(
    "get_pty_session_info",
    info.id == "term-1" and info.active and (info.cols, info.rows) == (100, 30)
    and info.envs.get("PTY_VAR") == "v" and info.envs.get("TERM") == "xterm-256color",
    repr(info),
)
ids = [s.id for s in sandbox.process.list_pty_sessions()]
check("list_pty_sessions", ids == ["term-1"], repr(ids))

# Resize (POST /process/pty/{id}/resize): the info changes and the foreground job gets SIGWINCH.
h.send_input(
    "bash -c 'trap \"echo WINCH=\\$((3*3)); exit\" WINCH; echo ARMED=$((2*2)); "
    "for i in $(seq 100); do sleep 0.1; done'\n"
)
term.wait_for("ARMED=4")
resized = h.resize(PtySize(rows=40, cols=120))
check("resize answers the info", (resized.cols, resized.rows) == (120, 40), repr(resized))
check("resize SIGWINCH", term.wait_for("WINCH=9"))
h.send_input("echo SIZE2=$(stty size)\n")
check("resize size", term.wait_for("SIZE2=40 120"))

# A second client of the same session gets its output from then on; input from either client
# goes to the one terminal.
h2 = sandbox.process.connect_pty_session("term-1")
seen = bytearray()
h2.send_input("echo C=$((5+5))\n")
r2 = h2.wait(on_data=seen.extend, timeout=3)
check("connect_pty_session", b"C=10" in seen and r2.exit_code is None, repr(bytes(seen)))
h2.disconnect()

# The shell's exit closes the socket with {"exitCode":3,"exitReason":"non-zero exit"}.
h.send_input("exit 3\n")
check("exit code through the close frame", term.ended(3, "non-zero exit"), repr(term.result))
deadline = time.monotonic() + 10
while sandbox.process.list_pty_sessions() and time.monotonic() < deadline:
    time.sleep(0.05)
check("an ended session is removed", sandbox.process.list_pty_sessions() == [])

# kill (DELETE): the clients are closed with 137 / SIGKILL and the session is gone.
h3 = sandbox.process.create_pty_session(id="term-2")
term3 = Terminal(h3)
h3.send_input("echo UP=$((8+8))\n")
term3.wait_for("UP=16")
h3.kill()
check("kill", term3.ended(137, "SIGKILL"), repr(term3.result))
try:
    sandbox.process.get_pty_session_info("term-2")
    check("killed session is gone", False, "still there")
except DaytonaNotFoundError:
    check("killed session is gone", True)

sandbox.delete()
print("OK", flush=True)
