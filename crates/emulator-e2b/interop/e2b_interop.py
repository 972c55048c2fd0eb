"""The official E2B Python SDK (pinned in requirements.txt) against the execseam E2B emulator.

Run by crates/emulator-e2b/tests/interop.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
pointing at the emulator.

    python e2b_interop.py main
        The exec and files surface, end to end. Prints `CHECK <name>` after each check and
        `ALL CHECKS PASSED <n>` at the end; any failure raises (non-zero exit).
    python e2b_interop.py pty
        `sandbox.pty.*` (envd's PTY process mode): create, send_stdin, stream_input, resize,
        connect, kill, and the exit through the handle. Same `CHECK` / `ALL CHECKS PASSED` lines.
    python e2b_interop.py state
        Sandbox state: pause (full and mode="filesystem") and resume by connect, create_snapshot
        (unnamed and named), Sandbox.create(snapshot_id), list_snapshots, delete_snapshot, fork,
        and get_host(port) fetched through the emulator. Same `CHECK` / `ALL CHECKS PASSED` lines.
    python e2b_interop.py fault <kind> <sandbox_id>
        Connects to an existing sandbox (Sandbox.connect) and runs one command while the Rust
        side has armed a fault; prints `FAULT <kind> <exception class> <detail>`.
"""

import asyncio
import os
import sys
import time
import urllib.error
import urllib.request

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

    # envd gives a non-PTY process no group or session of its own: its `SysProcAttr` holds only
    # the credentials and the cgroup fd, no `Setpgid`/`Setsid` (e2b-dev/infra@54693ff35
    # packages/envd/internal/services/process/handler/handler.go lines 223-230), so every such
    # command is in envd's group; and `kill` (`SendSignal`) signals the one pid
    # (`p.cmd.Process.Signal`, line 481): a background child lives on.
    h = sbx.commands.run(
        "ps -o pgid= -p $$ > /home/user/pg; sleep 60 >/dev/null 2>&1 & echo $! > /home/user/bg; wait",
        background=True,
    )
    # Once the child is there: the command's group, then this one's.
    r = sbx.commands.run(
        "until [ -s /home/user/bg ]; do sleep 0.01; done; cat /home/user/pg; ps -o pgid= -p $$"
    )
    own, other = (r.stdout.split() + ["", ""])[:2]
    check("a command leads no process group of its own (envd's)", own == other and own != str(h.pid),
          repr((own, other, h.pid)))
    check("kill a command with a background child", sbx.commands.kill(h.pid) is True)
    expect_raise("its wait raises", CommandExitException, h.wait)
    r = sbx.commands.run("bg=$(cat /home/user/bg); kill -0 $bg && echo alive; kill $bg")
    check("kill signals the pid only: the background child lived on", r.stdout == "alive\n", repr(r.stdout))

    # Connect to a running command.
    h = sbx.commands.run("sleep 0.5; echo late", background=True)
    h2 = sbx.commands.connect(h.pid)
    r = h2.wait()
    check("connect to a running command", r.stdout == "late\n", repr(r.stdout))
    h.disconnect()

    # A late Connect: envd >= 0.6.12 keeps an ended process's end event 30 s "so a late Connect
    # can still recover the exit code" (infra packages/envd/internal/services/process/service.go
    # terminatedRetentionTTL); only the end event, no output; List shows live processes only.
    h = sbx.commands.run("sleep 0.2; echo gone; exit 7", background=True)
    pid = h.pid
    h.disconnect()
    time.sleep(0.8)
    listed = [p.pid for p in sbx.commands.list()]
    e = expect_raise("a late connect gets the retained exit", CommandExitException,
                     lambda: sbx.commands.connect(pid).wait())
    check("late connect: exit code, no output, not listed",
          e.exit_code == 7 and e.stdout == "" and pid not in listed, repr((e.exit_code, e.stdout, listed)))

    # The command timeout is envd's process deadline.
    expect_raise(
        "timeout is TimeoutException",
        TimeoutException,
        lambda: sbx.commands.run("sleep 5", timeout=1),
    )

    # The deadline kills the command, whether or not the SDK still listens: envd runs a Start
    # with a timeout under a context of its own and `exec.CommandContext` kills the process at
    # the deadline (infra `packages/envd/internal/services/process/start.go`); the SDK's
    # `commands.run(timeout=)` sends it as `Connect-Timeout-Ms` (`e2b/sandbox_sync/commands/
    # command.py` `run` -> `_start`, `timeout=`) and raises `TimeoutException` on the
    # `deadline_exceeded` it gets (`e2b/envd/rpc.py` `handle_rpc_exception`).
    expect_raise(
        "timeout raises TimeoutException",
        TimeoutException,
        lambda: sbx.commands.run("sleep 2; touch /home/user/after-deadline", timeout=1),
    )
    time.sleep(2.5)
    check("the deadline killed the command", not sbx.files.exists("/home/user/after-deadline"))
    check(
        "a timed-out command is gone from the list",
        all("after-deadline" not in " ".join(p.args) for p in sbx.commands.list()),
        repr(sbx.commands.list()),
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

    # files.write(metadata=): the SDK sends `X-Metadata-<key>` headers (`e2b/sandbox/filesystem/
    # filesystem.py` `metadata_to_headers`); envd lowercases the keys and stores them as
    # `user.e2b.<key>` xattrs, answers with what it reads back, and returns them on every
    # EntryInfo (`envd/internal/api/upload.go` `extractMetadataHeaders`/`processFile`,
    # `shared/pkg/filesystem/xattr.go`, `services/filesystem/utils.go` `entryInfo`).
    info = sbx.files.write("/home/user/meta.txt", "m", metadata={"Owner": "alice", "stage": "draft-1"})
    want = {"owner": "alice", "stage": "draft-1"}
    check("write metadata comes back", info.metadata == want, repr(info))
    check("get_info metadata", sbx.files.get_info("/home/user/meta.txt").metadata == want)
    listed = {e.name: e.metadata for e in sbx.files.list("/home/user")}
    check("list metadata", listed.get("meta.txt") == want, repr(listed))
    # The metadata is the file's own: the xattrs are visible inside the sandbox.
    r = sbx.commands.run(
        "python3 -c \"import os; print(os.getxattr('/home/user/meta.txt', 'user.e2b.owner').decode())\""
    )
    check("metadata is an xattr in the sandbox", r.stdout == "alice\n", repr(r.stdout))
    # Overwriting replaces the whole set (`WriteMetadata` clears keys absent from the upload).
    info = sbx.files.write("/home/user/meta.txt", "m2", metadata={"stage": "final"})
    check("rewrite replaces metadata", info.metadata == {"stage": "final"}, repr(info))
    info = sbx.files.write("/home/user/meta.txt", "m3")
    check("a write without metadata clears it", info.metadata is None, repr(info))
    check("cleared on get_info too", sbx.files.get_info("/home/user/meta.txt").metadata is None)
    expect_raise(
        "bad metadata is InvalidArgumentException",
        InvalidArgumentException,
        lambda: sbx.files.write("/home/user/meta.txt", "x", metadata={"bad key": "v"}),
    )

    # gzip=True: the upload is gzip-compressed octet-stream with `Content-Encoding: gzip`
    # (`filesystem.py` `write_files`, `to_upload_body`) and envd decompresses it
    # (`api/encoding.go` `getDecompressedBody`); `read(gzip=True)` asks with
    # `Accept-Encoding: gzip` and envd compresses the answer (`api/download.go`).
    payload = "compressible " * 4096
    sbx.files.write("/home/user/big.txt", payload, gzip=True)
    r = sbx.commands.run("wc -c < /home/user/big.txt")
    check("gzip upload is stored decompressed", r.stdout.strip() == str(len(payload)), repr(r.stdout))
    check("gzip read", sbx.files.read("/home/user/big.txt", gzip=True) == payload)

    # Signed URLs: `download_url`/`upload_url` sign `path:operation:username:token[:expiration]`
    # with SHA-256 (`e2b/sandbox/signature.py`), envd checks it when no access token is sent
    # (`api/auth.go` `validateSigning`). A plain HTTP client uses them without any SDK headers.
    import httpx

    sbx.files.write("/home/user/signed.txt", "signed-data")
    url = sbx.download_url("/home/user/signed.txt")
    check("download_url is signed", "signature=v1_" in url, url)
    r = httpx.get(url)
    check("download_url works", r.status_code == 200 and r.text == "signed-data", repr((r.status_code, r.text)))
    r = httpx.get(sbx.download_url("/home/user/signed.txt", use_signature_expiration=60))
    check("download_url with expiration", r.status_code == 200 and r.text == "signed-data", repr(r.status_code))
    r = httpx.get(sbx.download_url("/home/user/signed.txt", use_signature_expiration=-10))
    check("an expired signature is refused", r.status_code == 401, repr((r.status_code, r.text)))
    r = httpx.get(url.replace("signed.txt", "other.txt"))
    check("a signature is for its path only", r.status_code in (401, 404), repr((r.status_code, r.text)))
    up = sbx.upload_url("/home/user/uploaded.txt")
    r = httpx.post(up, files={"file": ("uploaded.txt", b"via-url")})
    check("upload_url works", r.status_code == 200, repr((r.status_code, r.text)))
    check("upload_url wrote the file", sbx.files.read("/home/user/uploaded.txt") == "via-url")
    r = httpx.post(url, files={"file": ("x", b"x")})
    check("a read signature cannot write", r.status_code in (401, 404), repr((r.status_code, r.text)))

    # files.watch_dir: the sync SDK polls (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`,
    # `e2b/sandbox_sync/filesystem/watch_handle.py`); envd reports fsnotify's events with names
    # relative to the watched directory (`envd/internal/services/filesystem/watch_sync.go`).
    from e2b.sandbox.filesystem.watch_handle import FilesystemEventType as Ev

    sbx.files.make_dir("/home/user/watched/sub")
    w = sbx.files.watch_dir("/home/user/watched")
    wr = sbx.files.watch_dir("/home/user/watched", recursive=True)
    sbx.files.write("/home/user/watched/a.txt", "x")
    time.sleep(0.3)
    sbx.commands.run("chmod 600 /home/user/watched/a.txt")
    time.sleep(0.3)
    sbx.commands.run("printf deep > /home/user/watched/sub/b.txt")
    time.sleep(0.3)
    sbx.files.remove("/home/user/watched/a.txt")
    time.sleep(0.3)
    got = [(e.name, e.type) for e in w.get_new_events()]
    for want in [("a.txt", Ev.CREATE), ("a.txt", Ev.WRITE), ("a.txt", Ev.CHMOD), ("a.txt", Ev.REMOVE)]:
        check(f"watch_dir {want[1].value}", want in got, repr(got))
    check("watch_dir is not recursive by default", all(not n.startswith("sub/") for n, _ in got), repr(got))
    check("events are delivered once", w.get_new_events() == [])
    got = [(e.name, e.type) for e in wr.get_new_events()]
    check("recursive watch_dir", ("sub/b.txt", Ev.CREATE) in got, repr(got))
    w.stop()
    expect_raise("a stopped watcher is gone", SandboxException, w.get_new_events)
    wr.stop()
    expect_raise(
        "watch_dir of a missing directory",
        SandboxException,
        lambda: sbx.files.watch_dir("/home/user/no-such-dir"),
    )

    asyncio.run(async_watch_dir(sbx.sandbox_id))

    # Connection handling: requests to a killed sandbox (the proxy's 502, bodies included) must
    # not poison the SDK's pooled keep-alive connections for a healthy one: a server that
    # answers without reading the body closes the connection and the next request on it fails
    # with a transport error (`SandboxUnreachableException` from `e2b/envd/api.py`
    # `handle_envd_api_transport_exception_with_health`). A loop of mixed calls, none may fail.
    dead = Sandbox.create()
    dead.kill()
    body = "z" * 300_000
    failures = []
    for i in range(25):
        for call in (
            lambda: dead.files.write("/home/user/x.txt", body),
            lambda: dead.commands.run("echo nope"),
            lambda: dead.files.read("/home/user/x.txt"),
        ):
            try:
                call()
                failures.append(f"{i}: a call to the killed sandbox succeeded")
            except SandboxNotRunningException:
                pass
            except Exception as e:  # noqa: BLE001 -- any other class is a failure
                failures.append(f"{i}: killed sandbox: {type(e).__name__}: {e}")
        try:
            sbx.files.write(f"/home/user/loop/{i}.txt", body)
            assert sbx.files.read(f"/home/user/loop/{i}.txt") == body
            assert sbx.commands.run(f"echo {i}").stdout == f"{i}\n"
            assert sbx.files.exists(f"/home/user/loop/{i}.txt")
        except Exception as e:  # noqa: BLE001
            failures.append(f"{i}: healthy sandbox: {type(e).__name__}: {e}")
    check("mixed calls to killed and healthy sandboxes", not failures, "\n".join(failures))

    # Lifecycle. pause: `POST /sandboxes/{id}/pause` 204, 409 -> False when already paused
    # (`e2b/sandbox_sync/sandbox_api.py` `_cls_pause`; infra `api/internal/handlers/
    # sandbox_pause.go`); a paused sandbox is out of the proxy's catalog, so envd calls get the
    # not-found 502 (`client-proxy/internal/proxy/proxy.go`); `connect` resumes it (201,
    # `handlers/sandbox_connect.go`) with its processes where they were (a full pause keeps
    # memory). list(query=) filters by metadata and state (`GET /v2/sandboxes?metadata=&state=`).
    from e2b import SandboxQuery, SandboxState

    life = Sandbox.create(metadata={"suite": "interop", "role": "life"}, timeout=600)
    # The counter is written to a temporary file and renamed: `echo > counter` truncates first,
    # and a pause (or a read) landing between the truncation and the write sees an empty file.
    life.commands.run(
        "i=0; while true; do i=$((i+1)); echo $i > /home/user/counter.new;"
        " mv /home/user/counter.new /home/user/counter; sleep 0.1; done",
        background=True,
    )
    time.sleep(0.6)
    check("pause", life.pause() is True)
    check("pause again is False", life.pause() is False)
    check("get_info paused", life.get_info().state == SandboxState.PAUSED, repr(life.get_info().state))
    paused = [i.sandbox_id for i in Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()]
    check("list paused", paused == [life.sandbox_id], repr(paused))
    running = [i.sandbox_id for i in Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()]
    check("list running leaves the paused one out", life.sandbox_id not in running and sbx.sandbox_id in running, repr(running))
    by_meta = [i.sandbox_id for i in Sandbox.list(query=SandboxQuery(metadata={"role": "life"})).next_items()]
    check("list by metadata", by_meta == [life.sandbox_id], repr(by_meta))
    expect_raise(
        "commands on a paused sandbox raise SandboxNotRunningException",
        SandboxNotRunningException,
        lambda: life.commands.run("true"),
    )
    time.sleep(1.5)
    resumed = Sandbox.connect(life.sandbox_id)
    check("connect resumes", resumed.get_info().state == SandboxState.RUNNING)
    c1 = int(resumed.files.read("/home/user/counter"))
    time.sleep(0.6)
    c2 = int(resumed.files.read("/home/user/counter"))
    check("the processes were frozen while paused", 3 <= c1 <= 12, repr(c1))
    check("and run again after the resume", c2 > c1, repr((c1, c2)))
    # get_metrics: `GET /sandboxes/{id}/metrics` -> `[SandboxMetric]` (`_cls_get_metrics`).
    m = resumed.get_metrics()
    check(
        "get_metrics",
        len(m) >= 1 and m[0].cpu_count == 2 and m[0].mem_total > 0 and m[0].mem_used > 0,
        repr(m),
    )
    # set_timeout: `POST /sandboxes/{id}/timeout` overwrites the end; at it the sandbox ends.
    resumed.set_timeout(1)
    time.sleep(2.5)
    check("set_timeout expiry ends the sandbox", resumed.is_running() is False)
    left = [i.sandbox_id for i in Sandbox.list().next_items()]
    check("an expired sandbox is not listed", life.sandbox_id not in left, repr(left))

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


async def async_watch_dir(sandbox_id):
    """files.watch_dir through the async SDK: one `WatchDir` server stream (`e2b/sandbox_async/
    filesystem/filesystem.py` `watch_dir`, `watch_handle.py` `AsyncWatchHandle`); envd sends a
    `start` event, then one `filesystem` event per fsnotify operation with the name relative to
    the watched directory, `entry` on CREATE/WRITE/CHMOD when `include_entry` is set, and ends
    the stream with the context's error at `Connect-Timeout-Ms` (envd `services/filesystem/
    watch.go` `watchHandler`, `utils.go` `opCarriesEntry`)."""
    from e2b import AsyncSandbox
    from e2b.exceptions import FileNotFoundException
    from e2b.sandbox.filesystem.watch_handle import FilesystemEventType as Ev

    asbx = await AsyncSandbox.connect(sandbox_id)
    await asbx.files.make_dir("/home/user/awatched/sub")
    got, rgot, exits = [], [], []
    w = await asbx.files.watch_dir(
        "/home/user/awatched", lambda e: got.append(e), on_exit=lambda err: exits.append(err), include_entry=True
    )
    wr = await asbx.files.watch_dir("/home/user/awatched", rgot.append, recursive=True)
    await asbx.files.write("/home/user/awatched/a.txt", "xy")
    await asyncio.sleep(0.3)
    await asbx.commands.run("chmod 600 /home/user/awatched/a.txt")
    await asyncio.sleep(0.3)
    await asbx.commands.run("printf deep > /home/user/awatched/sub/b.txt")
    await asyncio.sleep(0.3)
    await asbx.files.remove("/home/user/awatched/a.txt")
    await asyncio.sleep(0.5)
    pairs = [(e.name, e.type) for e in got]
    for want in [("a.txt", Ev.CREATE), ("a.txt", Ev.WRITE), ("a.txt", Ev.CHMOD), ("a.txt", Ev.REMOVE)]:
        check(f"async watch_dir {want[1].value}", want in pairs, repr(pairs))
    check("async watch_dir is not recursive by default", all(not n.startswith("sub/") for n, _ in pairs), repr(pairs))
    chmod = [e for e in got if e.type == Ev.CHMOD]
    check(
        "include_entry carries the entry on CHMOD",
        chmod and chmod[0].entry is not None and chmod[0].entry.path == "/home/user/awatched/a.txt"
        and chmod[0].entry.permissions == "-rw-------",
        repr(chmod),
    )
    removed = [e for e in got if e.type == Ev.REMOVE]
    check("and never on REMOVE", removed and all(e.entry is None for e in removed), repr(removed))
    check("async recursive watch_dir", ("sub/b.txt", Ev.CREATE) in [(e.name, e.type) for e in rgot], repr(rgot))
    await w.stop()
    check("stop calls on_exit with None", exits == [None], repr(exits))
    n = len(got)
    await asbx.files.write("/home/user/awatched/after-stop.txt", "x")
    await asyncio.sleep(0.3)
    check("no events after stop", len(got) == n, repr(got[n:]))
    await wr.stop()
    try:
        await asbx.files.watch_dir("/home/user/no-such-dir", lambda e: None)
        raise AssertionError("async watch_dir of a missing directory did not raise")
    except FileNotFoundException:
        check("async watch_dir of a missing directory raises FileNotFoundException", True)
    # The watch's `timeout` is the stream's deadline (`timeout_ms=`), ended by envd with
    # `deadline_exceeded`, which the SDK maps to TimeoutException and hands to on_exit.
    done = asyncio.Event()
    texits = []

    def on_exit(err):
        texits.append(err)
        done.set()

    await asbx.files.watch_dir("/home/user/awatched", lambda e: None, on_exit=on_exit, timeout=1)
    await asyncio.wait_for(done.wait(), 10)
    check("the watch timeout ends it with TimeoutException", isinstance(texits[0], TimeoutException), repr(texits))
    # A killed sandbox ends the stream; the SDK's health probe makes it SandboxNotRunningException.
    victim = await AsyncSandbox.create()
    done = asyncio.Event()
    kexits = []

    def on_kill(err):
        kexits.append(err)
        done.set()

    await victim.files.watch_dir("/home/user", lambda e: None, on_exit=on_kill)
    await victim.kill()
    await asyncio.wait_for(done.wait(), 10)
    check(
        "a killed sandbox ends the watch with SandboxNotRunningException",
        isinstance(kexits[0], SandboxNotRunningException),
        repr(kexits),
    )


class Terminal:
    """A PTY handle's output, read on a thread (`handle.wait(on_pty=...)`, as the SDK's docs show),
    and the handle's outcome (its result or the exception `wait` raised)."""

    def __init__(self, handle):
        import threading

        self.handle = handle
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.outcome = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        def on_pty(chunk):
            with self.lock:
                self.buf.extend(chunk)

        try:
            self.outcome = self.handle.wait(on_pty=on_pty)
        except Exception as e:  # noqa: BLE001 -- kept for the checks
            self.outcome = e

    def text(self):
        with self.lock:
            return self.buf.decode("utf-8", "replace")

    def wait_for(self, needle, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            if not self.thread.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} not in the terminal's output: {self.text()!r}")

    def finished(self, timeout=30):
        self.thread.join(timeout)
        return not self.thread.is_alive()


def pty():
    # The real envd starts `/bin/bash -i -l` (the SDK's `Pty.create`, e2b/sandbox_sync/commands/
    # pty.py) on a pseudo-terminal of the requested size (`pty.StartWithSize`, envd
    # packages/envd/internal/services/process/handler/handler.go); output arrives as `pty` bytes.
    # Typed input is echoed by the terminal, so every expected line is computed by the shell
    # (`$((40+2))`) and never appears in the echo of what was typed.
    from e2b.sandbox.commands.command_handle import PtySize

    sbx = Sandbox.create(timeout=600)
    h = sbx.pty.create(PtySize(rows=24, cols=80), envs={"PTY_VAR": "v"}, cwd="/home/user")
    check("pty create", h.pid > 0, repr(h.pid))
    term = Terminal(h)
    sbx.pty.send_stdin(
        h.pid,
        b"test -t 0 && test -t 1 && echo TTY=$((40+2)); echo SIZE=$(stty size); "
        b"echo ENV=$TERM:$LANG:$PTY_VAR:$(whoami):$(pwd)\n",
    )
    check("pty is a terminal", term.wait_for("TTY=42"))
    check("pty size", term.wait_for("SIZE=24 80"))
    # The SDK's defaults (TERM, LANG) and the request's envs, the user and the cwd.
    check("pty env", term.wait_for("ENV=xterm-256color:C.UTF-8:v:user:/home/user"))
    check("pty output is the terminal's", "\r\n" in term.text(), repr(term.text()[-200:]))
    # `pty.StartWithSize` (handler.go line 297; creack/pty sets `Setsid` and `Setctty`): the
    # process leads a session and process group of its own, unlike a non-PTY command.
    sbx.pty.send_stdin(
        h.pid,
        b"[ $(ps -o sid= -p $$) -eq $$ ] && [ $(ps -o pgid= -p $$) -eq $$ ] && echo LEADS=$((20+1))\n",
    )
    check("pty leads its own session", term.wait_for("LEADS=21"))

    # Resize: the terminal's size changes and the foreground job gets SIGWINCH.
    # (The kernel signals the terminal's foreground process group: here the job running bash -c.)
    sbx.pty.send_stdin(
        h.pid,
        b"bash -c 'trap \"echo WINCH=\\$((3*3)); exit\" WINCH; echo ARMED=$((2*2)); "
        b"for i in $(seq 100); do sleep 0.1; done'\n",
    )
    term.wait_for("ARMED=4")
    sbx.pty.resize(h.pid, PtySize(rows=40, cols=120))
    check("pty resize SIGWINCH", term.wait_for("WINCH=9"))
    sbx.pty.send_stdin(h.pid, b"echo SIZE2=$(stty size)\n")
    check("pty resize size", term.wait_for("SIZE2=40 120"))

    # stream_input (StreamInput with `pty` data).
    sbx.pty.stream_input(h.pid, [b"echo S=", b"$((6+6))\n"])
    check("pty stream_input", term.wait_for("S=12"))

    # ^C typed into the terminal interrupts the foreground job, the shell lives on.
    sbx.pty.send_stdin(h.pid, b"sleep 100; echo NOTINT=$((1+1))\n")
    time.sleep(0.5)
    sbx.pty.send_stdin(h.pid, b"\x03")
    sbx.pty.send_stdin(h.pid, b"echo AFTER=$((7*7))\n")
    check("pty ctrl-c", term.wait_for("AFTER=49", timeout=20) and "NOTINT=2" not in term.text())

    # connect: a second stream of the same PTY gets its output from then on.
    h2 = sbx.pty.connect(h.pid)
    check("pty connect pid", h2.pid == h.pid, repr(h2.pid))
    sbx.pty.send_stdin(h.pid, b"echo C=$((5+5))\n")
    seen = bytearray()
    for _, _, chunk in h2:
        if chunk:
            seen.extend(chunk)
        if b"C=10" in seen:
            break
    check("pty connect output", b"C=10" in seen, repr(bytes(seen)))
    h2.disconnect()

    # A PTY process takes no stdin (envd: "tty assigned to process — input should be written to
    # the pty, not the stdin", an internal error the SDK raises as SandboxException).
    expect_raise("pty stdin refused", SandboxException, lambda: sbx.commands.send_stdin(h.pid, "x"))

    # The shell's exit ends the handle: exit code 3 is CommandExitException (handle.wait).
    sbx.pty.send_stdin(h.pid, b"exit 3\n")
    check("pty exit", term.finished(), term.text()[-200:])
    check(
        "pty exit code",
        isinstance(term.outcome, CommandExitException) and term.outcome.exit_code == 3,
        repr(term.outcome),
    )

    # kill: SIGKILL (SendSignal); the handle ends with envd's "signal: killed" (exit code -1).
    h3 = sbx.pty.create(PtySize(rows=10, cols=40))
    term3 = Terminal(h3)
    sbx.pty.send_stdin(h3.pid, b"echo UP=$((8+8))\n")
    term3.wait_for("UP=16")
    check("pty kill", sbx.pty.kill(h3.pid) is True)
    check("pty killed ends", term3.finished())
    check(
        "pty killed outcome",
        isinstance(term3.outcome, CommandExitException)
        and term3.outcome.exit_code == -1
        and term3.outcome.error == "signal: killed",
        repr(term3.outcome),
    )
    # The process is gone: kill answers not_found, which the SDK returns as False.
    deadline = time.monotonic() + 10
    while sbx.pty.kill(h3.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    check("pty kill gone", sbx.pty.kill(h3.pid) is False)
    sbx.kill()
    print(f"ALL CHECKS PASSED {len(CHECKS)}", flush=True)


def fetch(host, path="/"):
    """GET through the emulator's address with `Host: <get_host(port)>`, as E2B's edge routes."""
    base = os.environ["E2B_API_URL"].rstrip("/")
    req = urllib.request.Request(base + path, headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def state():
    sbx = Sandbox.create(timeout=600)
    check("state create", bool(sbx.sandbox_id))
    sbx.files.write("/home/user/state.txt", "v1")
    bg = sbx.commands.run("sleep 300", background=True)
    check("background process", bg.pid > 0, repr(bg.pid))

    # Snapshots (`snapshot_template_create.go`): unnamed `<template>:default`, named
    # `<team>/<name>:default` with the name in `names`.
    snap = sbx.create_snapshot()
    check("snapshot id is a template with the default tag", snap.snapshot_id.endswith(":default"), snap.snapshot_id)
    check("unnamed snapshot has no names", list(snap.names) == [], repr(snap.names))
    named = sbx.create_snapshot(name="base")
    check("named snapshot id", named.snapshot_id.endswith("/base:default"), named.snapshot_id)
    check("named snapshot names", len(named.names) == 1 and named.names[0].endswith("/base"), repr(named.names))
    check("the source runs on after a snapshot", sbx.is_running())
    check(
        "the source's processes survive a snapshot",
        sbx.commands.run(f"kill -0 {bg.pid} && echo alive").stdout == "alive\n",
    )

    sbx.files.write("/home/user/state.txt", "v2")
    restored = Sandbox.create(snap.snapshot_id, timeout=120)
    check("create from a snapshot", restored.sandbox_id != sbx.sandbox_id)
    check("restored files are the snapshot's", restored.files.read("/home/user/state.txt") == "v1")
    check("the source keeps its own", sbx.files.read("/home/user/state.txt") == "v2")

    pages = sbx.list_snapshots()
    ids = []
    while pages.has_next:
        ids += [s.snapshot_id for s in pages.next_items()]
    check("list_snapshots of the sandbox", snap.snapshot_id in ids and named.snapshot_id in ids, repr(ids))

    # `template_delete.go`: refused while a running sandbox uses the template.
    expect_raise(
        "delete_snapshot refused while a sandbox runs from it",
        SandboxException,
        lambda: Sandbox.delete_snapshot(snap.snapshot_id),
    )
    restored.kill()
    check("delete_snapshot", Sandbox.delete_snapshot(snap.snapshot_id) is True)
    check("delete_snapshot again is False", Sandbox.delete_snapshot(snap.snapshot_id) is False)
    e = expect_raise(
        "create from a deleted snapshot",
        SandboxException,
        lambda: Sandbox.create(snap.snapshot_id, timeout=60),
    )
    check("create from a deleted snapshot says not found", "not found" in str(e), str(e))
    check("delete the named snapshot", Sandbox.delete_snapshot(named.snapshot_id) is True)

    # Fork (`sandbox_fork.go`): independent sandboxes with the source's files.
    forks = sbx.fork(timeout=120)
    check("fork gives one sandbox", len(forks) == 1 and isinstance(forks[0], Sandbox), repr(forks))
    fork = forks[0]
    check("fork has the source's files", fork.files.read("/home/user/state.txt") == "v2")
    fork.files.write("/home/user/state.txt", "fork")
    check("the source does not see the fork's change", sbx.files.read("/home/user/state.txt") == "v2")
    sbx.files.write("/home/user/state.txt", "v3")
    check("the fork does not see the source's change", fork.files.read("/home/user/state.txt") == "fork")
    fork.kill()

    # Exposed ports: get_host(port) = `{port}-{id}.{domain}`, routed by E2B's edge.
    sbx.commands.run("mkdir -p /home/user/www && printf served > /home/user/www/index.html")
    sbx.commands.run("cd /home/user/www && python3 -m http.server 8765", background=True)
    host = sbx.get_host(8765)
    check("get_host names the port and the sandbox", host.startswith(f"8765-{sbx.sandbox_id}."), host)
    status, body = 0, b""
    for _ in range(100):
        status, body = fetch(host, "/index.html")
        if status == 200:
            break
        time.sleep(0.1)
    check("the exposed port answers", status == 200 and body == b"served", repr((status, body[:200])))
    status, body = fetch(sbx.get_host(8766))
    check("a closed port is the proxy's 502", status == 502 and b"port is not open" in body, repr((status, body[:200])))

    # Pause keeps memory by default: the background process is there after connect.
    check("pause", sbx.pause() is True)
    check("pause again is False", sbx.pause() is False)
    check("info says paused", sbx.get_info().state.value == "paused", repr(sbx.get_info().state))
    status, _ = fetch(host, "/index.html")
    check("a paused sandbox's port is not reachable", status == 502, repr(status))
    expect_raise(
        "fork of a paused sandbox is refused",
        SandboxException,
        lambda: sbx.fork(),
    )
    resumed = Sandbox.connect(sbx.sandbox_id, timeout=600)
    check("connect resumes", resumed.get_info().state.value == "running")
    check("files kept by pause", resumed.files.read("/home/user/state.txt") == "v3")
    check(
        "processes kept by a full pause",
        resumed.commands.run(f"kill -0 {bg.pid} && echo alive").stdout == "alive\n",
    )

    # mode="filesystem" (`memory: false`): files kept, processes gone after the resume.
    check("filesystem-only pause", resumed.pause(mode="filesystem") is True)
    again = Sandbox.connect(sbx.sandbox_id, timeout=600)
    check("files kept by a filesystem-only pause", again.files.read("/home/user/state.txt") == "v3")
    check(
        "processes gone after a filesystem-only pause",
        again.commands.run(f"kill -0 {bg.pid} 2>/dev/null && echo alive || echo gone").stdout == "gone\n",
    )
    again.kill()
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
    elif sys.argv[1] == "pty":
        pty()
    elif sys.argv[1] == "state":
        state()
    else:
        fault(sys.argv[2], sys.argv[3])
    print(f"took {time.monotonic() - started:.2f}s", flush=True)
