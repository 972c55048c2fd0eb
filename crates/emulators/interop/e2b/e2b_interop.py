"""The official E2B Python SDK (pinned in requirements.txt) against the execseam E2B emulator.

Run by crates/emulators/tests/interop_e2b.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
pointing at the emulator.

    python e2b_interop.py main
        The exec and files surface, end to end. Prints `CHECK <name>` after each check and
        `ALL CHECKS PASSED <n>` at the end; any failure raises (non-zero exit).
    python e2b_interop.py fault <kind> <sandbox_id>
        Connects to an existing sandbox (Sandbox.connect) and runs one command while the Rust
        side has armed a fault; prints `FAULT <kind> <exception class> <detail>`.
"""

import sys
import time

from e2b import Sandbox
from e2b.exceptions import (
    AuthenticationException,
    InvalidArgumentException,
    RateLimitException,
    SandboxException,
    SandboxNotRunningException,
    TimeoutException,
)
from e2b.sandbox.commands.command_handle import CommandExitException
from e2b.sandbox.filesystem.filesystem import FileType

CHECKS = []


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError(f"{name} failed: {detail}")
    CHECKS.append(name)
    print(f"CHECK {name}", flush=True)


def expect_raise(name, exc_type, fn):
    try:
        fn()
    except exc_type as e:
        check(name, True)
        return e
    except Exception as e:  # noqa: BLE001 -- report the wrong class
        raise AssertionError(f"{name}: raised {type(e).__name__}: {e}, want {exc_type.__name__}")
    raise AssertionError(f"{name}: did not raise {exc_type.__name__}")


def main():
    sbx = Sandbox.create(envs={"SBX_GLOBAL": "from-create"}, timeout=600)
    check("create", bool(sbx.sandbox_id), sbx.sandbox_id)
    check("is_running", sbx.is_running())

    # Foreground, separate streams.
    r = sbx.commands.run("echo hi; echo err >&2")
    check("run stdout", r.stdout == "hi\n", repr(r.stdout))
    check("run stderr", r.stderr == "err\n", repr(r.stderr))
    check("run exit 0", r.exit_code == 0 and r.error is None, repr(r))

    # A non-zero exit raises CommandExitException (a SandboxException) with the exact code.
    e = expect_raise(
        "non-zero exit raises",
        CommandExitException,
        lambda: sbx.commands.run("printf partial; echo bad >&2; exit 3"),
    )
    check("exit code 3", e.exit_code == 3, repr(e.exit_code))
    check("exit error text", e.error == "exit status 3", repr(e.error))
    check("exit keeps output", e.stdout == "partial" and e.stderr == "bad\n", repr((e.stdout, e.stderr)))
    check("CommandExitException is a SandboxException", isinstance(e, SandboxException))

    # Default environment and working directory.
    r = sbx.commands.run('printf "%s|%s|%s|%s|" "$HOME" "$USER" "$SBX_GLOBAL" "$PATH"; pwd')
    home, user, glob, path, cwd = r.stdout.split("|")
    check("default HOME", home == "/home/user", home)
    check("default USER", user == "user", user)
    check("create envs reach commands", glob == "from-create", glob)
    check("PATH set", "/usr/bin" in path, path)
    check("default cwd is home", cwd == "/home/user\n", repr(cwd))

    # envs and cwd.
    r = sbx.commands.run('printf "%s" "$FOO"; pwd', envs={"FOO": "bar baz", "SBX_GLOBAL": "overridden"}, cwd="/tmp")
    check("envs", r.stdout.startswith("bar baz"), repr(r.stdout))
    check("cwd", r.stdout.endswith("/tmp\n"), repr(r.stdout))
    r = sbx.commands.run('printf "%s" "$SBX_GLOBAL"', envs={"SBX_GLOBAL": "overridden"})
    check("request envs win", r.stdout == "overridden", repr(r.stdout))
    expect_raise(
        "missing cwd is InvalidArgumentException",
        InvalidArgumentException,
        lambda: sbx.commands.run("true", cwd="/home/user/no/such/dir"),
    )

    # on_stdout / on_stderr callbacks.
    outs, errs = [], []
    r = sbx.commands.run(
        "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done",
        on_stdout=outs.append,
        on_stderr=errs.append,
    )
    check("on_stdout", "".join(outs) == "out1\nout2\nout3\n", repr(outs))
    check("on_stderr", "".join(errs) == "err1\nerr2\nerr3\n", repr(errs))
    check("callbacks match result", r.stdout == "".join(outs) and r.stderr == "".join(errs))

    # Background plus wait.
    h = sbx.commands.run("sleep 0.3; echo done", background=True)
    check("background pid", isinstance(h.pid, int) and h.pid > 0, repr(h.pid))
    listed = [p.pid for p in sbx.commands.list()]
    check("list shows the background command", h.pid in listed, repr(listed))
    r = h.wait()
    check("background wait", r.stdout == "done\n" and r.exit_code == 0, repr(r))

    # stdin via send_stdin, then close_stdin.
    h = sbx.commands.run("cat; echo eof", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello\n")
    h.send_stdin(b"bytes\n")
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    check("send_stdin", r.stdout == "hello\nbytes\neof\n", repr(r.stdout))

    # stdin via stream_input (client streaming).
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.stream_input(h.pid, ["a", "b", b"c\n"])
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    check("stream_input", r.stdout == "abc\n", repr(r.stdout))

    # Without stdin=True, cat sees EOF at once.
    r = sbx.commands.run("cat; echo after")
    check("no stdin is EOF", r.stdout == "after\n", repr(r.stdout))

    # Kill a process: the command ends killed, reported as exit code -1 with a signal status.
    h = sbx.commands.run("sleep 60", background=True)
    check("kill", sbx.commands.kill(h.pid) is True)
    e = expect_raise("killed command raises on wait", CommandExitException, h.wait)
    check("killed exit code -1", e.exit_code == -1, repr(e.exit_code))
    check("killed error text", e.error == "signal: killed", repr(e.error))
    check("kill unknown pid is False", sbx.commands.kill(999_999) is False)

    # Connect to a running command.
    h = sbx.commands.run("sleep 0.5; echo late", background=True)
    h2 = sbx.commands.connect(h.pid)
    r = h2.wait()
    check("connect to a running command", r.stdout == "late\n", repr(r.stdout))
    h.disconnect()

    # The command timeout is envd's process deadline.
    expect_raise(
        "timeout is TimeoutException",
        TimeoutException,
        lambda: sbx.commands.run("sleep 5", timeout=1),
    )

    # Files: write, read, list with depth; the same paths as commands.
    info = sbx.files.write("/home/user/dir/x.txt", "data")
    check("files.write", info.path == "/home/user/dir/x.txt", repr(info))
    check("files.read", sbx.files.read("/home/user/dir/x.txt") == "data")
    r = sbx.commands.run("cat /home/user/dir/x.txt")
    check("commands see files-API writes", r.stdout == "data", repr(r.stdout))
    sbx.commands.run("mkdir -p /home/user/dir/sub && printf deep > /home/user/dir/sub/y.txt")
    check("files see command writes", sbx.files.read("/home/user/dir/sub/y.txt") == "deep")
    check("files.read bytes", bytes(sbx.files.read("/home/user/dir/sub/y.txt", format="bytes")) == b"deep")
    sbx.files.write("relative.txt", "rel")
    check("relative paths are under home", sbx.files.read("/home/user/relative.txt") == "rel")

    one = sbx.files.list("/home/user/dir")
    check("list depth 1", sorted(e.name for e in one) == ["sub", "x.txt"], repr(one))
    kinds = {e.name: e.type for e in one}
    check("list types", kinds == {"sub": FileType.DIR, "x.txt": FileType.FILE}, repr(kinds))
    x = next(e for e in one if e.name == "x.txt")
    check("list size and path", x.size == 4 and x.path == "/home/user/dir/x.txt", repr(x))
    two = sbx.files.list("/home/user/dir", depth=2)
    check(
        "list depth 2",
        sorted(e.path for e in two) == ["/home/user/dir/sub", "/home/user/dir/sub/y.txt", "/home/user/dir/x.txt"],
        repr([e.path for e in two]),
    )
    check("exists", sbx.files.exists("/home/user/dir/x.txt") and not sbx.files.exists("/home/user/nope"))
    check("make_dir existing is False", sbx.files.make_dir("/home/user/dir") is False)
    check("make_dir new is True", sbx.files.make_dir("/home/user/newdir/a") is True)
    gi = sbx.files.get_info("/home/user/dir/x.txt")
    check("get_info", gi.type == FileType.FILE and gi.size == 4, repr(gi))
    sbx.files.rename("/home/user/dir/x.txt", "/home/user/dir/z.txt")
    check("rename", sbx.files.exists("/home/user/dir/z.txt") and not sbx.files.exists("/home/user/dir/x.txt"))
    sbx.files.remove("/home/user/dir")
    check("remove", not sbx.files.exists("/home/user/dir"))

    # A second sandbox is isolated from the first.
    other = Sandbox.create()
    other.files.write("/home/user/only-here.txt", "x")
    check("sandboxes are isolated", not sbx.files.exists("/home/user/only-here.txt"))
    check("kill other", other.kill() is True)

    # Connect by id, then kill; a killed sandbox is not running.
    again = Sandbox.connect(sbx.sandbox_id)
    check("connect", again.commands.run("echo again").stdout == "again\n")
    check("kill sandbox", sbx.kill() is True)
    check("not running after kill", sbx.is_running() is False)
    expect_raise(
        "a killed sandbox raises SandboxNotRunningException",
        SandboxNotRunningException,
        lambda: again.commands.run("echo nope"),
    )
    print(f"ALL CHECKS PASSED {len(CHECKS)}", flush=True)


def fault(kind, sandbox_id):
    sbx = Sandbox.connect(sandbox_id)
    wants = {
        "rate-limited": RateLimitException,
        "auth": AuthenticationException,
        "vanish": SandboxNotRunningException,
        "deadline": TimeoutException,
        "stream-error": SandboxException,
        "no-end-event": Exception,
    }
    want = wants[kind]
    try:
        r = sbx.commands.run("printf before; sleep 1; printf after")
    except want as e:
        print(f"FAULT {kind} {type(e).__name__} {e}", flush=True)
        if kind == "no-end-event":
            assert str(e) == "Command ended without an end event", str(e)
        return
    raise AssertionError(f"{kind}: no exception, got {r!r}")


if __name__ == "__main__":
    started = time.monotonic()
    if sys.argv[1] == "main":
        main()
    else:
        fault(sys.argv[2], sys.argv[3])
    print(f"took {time.monotonic() - started:.2f}s", flush=True)
