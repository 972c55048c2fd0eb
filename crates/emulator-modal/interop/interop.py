"""The official Modal client (modal==1.6.4, pinned in requirements.txt) against execseam's Modal
emulator.

Usage:
    interop.py main          the sandbox, exec and filesystem surface, V2 (the default backend)
    interop.py v1            the V1 backend (MODAL_SANDBOX_V2=0 is set by the caller)
    interop.py entrypoint    the sandbox's own stdio (Sandbox.create(*args)) and the image's ENV/WORKDIR
    interop.py retention     the entrypoint's output past what is retained (the Rust side set a
                             1000-byte retention)
    interop.py tunnel-ca     Tunnel.url verified with the certificate `execseam emulate modal`
                             printed (run with the environment it printed)
    interop.py fault <kind>  one call while the Rust side has armed a fault; prints
                             `FAULT <kind> <outcome>`

MODAL_SERVER_URL, MODAL_TOKEN_ID and MODAL_TOKEN_SECRET come from the environment.

Every assertion states what the real service does, with the client source (the 1.6.4 wheel) or
Modal's proto comments that say so; paths are relative to site-packages/modal. Prints `ok <check>`
for each check and `done` at the end; any failure raises.
"""

import asyncio
import logging
import os
import sys
import tempfile
import time

import modal
from modal.exception import (
    AlreadyExistsError,
    AuthError,
    InvalidError,
    NotFoundError,
    SandboxFilesystemDirectoryNotEmptyError,
    SandboxFilesystemIsADirectoryError,
    SandboxFilesystemNotADirectoryError,
    SandboxFilesystemNotFoundError,
    SandboxFilesystemPathAlreadyExistsError,
    SandboxTimeoutError,
)

APP = "execseam-interop"
FS_TOOLS = "/__modal/.bin/modal-sandbox-fs-tools"


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok {name}", flush=True)


def raises(exc, call, returned):
    """`call()` raises `exc`, which is returned; `returned` is the failure when it returns."""
    try:
        call()
    except exc as e:
        return e
    raise AssertionError(returned)


def is_v1_id(sid):
    # sandbox/_common.py _is_v1_sandbox_id: "sb-" + 22 of [0-9A-Za-z] is V1, anything else V2.
    prefix, _, rest = sid.partition("-")
    return prefix == "sb" and len(rest) == 22 and rest.isalnum() and rest.isascii()


def run(sb, *args, **kw):
    p = sb.exec(*args, **kw)
    out, err = p.stdout.read(), p.stderr.read()
    return p.wait(), out, err


def main():
    app = modal.App.lookup(APP, create_if_missing=True)
    check("App.lookup(create_if_missing=True) gives an app id", app.app_id.startswith("ap-"), app.app_id)
    raises(NotFoundError, lambda: modal.App.lookup("execseam-no-such-app"), "App.lookup of a missing app returned")
    # app.py lookup: create_if_missing=False sends OBJECT_CREATION_TYPE_UNSPECIFIED, a pure
    # lookup; NOT_FOUND is NotFoundError (_grpc_client.py _STATUS_TO_EXCEPTION).
    check("App.lookup of a missing app is NotFoundError", True)

    t0 = time.monotonic()
    sb = modal.Sandbox.create(app=app, timeout=120, env={"SB_LEVEL": "sandbox"})
    check("Sandbox.create returns a V2 sandbox id (not the V1 shape)", not is_v1_id(sb.object_id), sb.object_id)
    check("Sandbox.create takes under 2 s", time.monotonic() - t0 < 2, time.monotonic() - t0)

    # exec: argv, workdir, env, stdin write/eof, separate stdout and stderr, wait/returncode.
    # sandbox/_common.py exec_via_tcr sends argv as command_args, env as secret_sources.
    p = sb.exec(
        "bash", "-c", 'read -r line; echo "got:$line cwd:$(pwd) foo:$FOO sb:$SB_LEVEL"; echo err >&2; exit 3',
        workdir="/tmp", env={"FOO": "bar baz"},
    )
    p.stdin.write(b"abc\n")
    p.stdin.write_eof()
    p.stdin.drain()
    out, err = p.stdout.read(), p.stderr.read()
    code = p.wait()
    check("exec: stdin reaches the command, stdout is its own stream",
          out == "got:abc cwd:/tmp foo:bar baz sb:sandbox\n", repr(out))
    check("exec: stderr is a separate stream", err == "err\n", repr(err))
    check("exec: wait() gives the exit code", code == 3 and p.returncode == 3, code)

    code, out, _ = run(sb, "printf", "%s|", "a b", "$HOME", "'q'", "")
    check("exec: argv is passed as is, never re-parsed by a shell", out == "a b|$HOME|'q'||", repr(out))

    code, out, _ = run(sb, "sh", "-c", "echo $HOME; pwd; id -u")
    check("exec: commands run as root with HOME=/root", out.split("\n")[0] == "/root" and out.split("\n")[2] == "0", repr(out))

    # container_process.py wait(): a `signal` exit status is returned as 128 + signal.
    code, _, _ = run(sb, "sh", "-c", "kill -TERM $$")
    check("exec: death by SIGTERM is returncode 143 (128 + 15)", code == 143, code)
    code, _, _ = run(sb, "sh", "-c", "kill -KILL $$")
    check("exec: death by SIGKILL is returncode 137 (128 + 9)", code == 137, code)

    # poll(): None while running (TaskExecPoll with no exit_status), then the code.
    p = sb.exec("sh", "-c", "sleep 1; exit 5")
    check("exec: poll() is None while the command runs", p.poll() is None)
    check("exec: wait() after poll() gives the code", p.wait() == 5)
    check("exec: poll() after the end gives the code", p.poll() == 5)

    # Bytes exact with text=False.
    p = sb.exec("sh", "-c", r"printf 'a\000b\377c'; printf '\001\376' >&2", text=False)
    out, err = p.stdout.read(), p.stderr.read()
    p.wait()
    check("exec: binary stdout and stderr are exact (text=False)", out == b"a\x00b\xffc" and err == b"\x01\xfe", (out, err))

    p = sb.exec("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; head -c 1000000 /dev/zero | tr '\\0' y >&2")
    out, err = p.stdout.read(), p.stderr.read()
    check("exec: 3 MB on stdout and 1 MB on stderr at once arrive whole",
          p.wait() == 0 and out == "x" * 3000000 and err == "y" * 1000000, (len(out), len(err)))

    # A large stdin through TaskExecStdinWrite (offset-addressed, io_streams.py _StreamWriter).
    blob = os.urandom(3 * 1024 * 1024)
    p = sb.exec("sh", "-c", "cat | sha256sum | cut -c1-64")
    p.stdin.write(blob)
    p.stdin.write_eof()
    p.stdin.drain()
    import hashlib
    check("exec: 3 MiB of stdin arrive exactly", p.stdout.read().strip() == hashlib.sha256(blob).hexdigest())
    p.wait()

    # Streaming: lines arrive while the command runs.
    p = sb.exec("sh", "-c", "echo one; sleep 1; echo two")
    t0 = time.monotonic()
    first = next(iter(p.stdout))
    check("exec: output streams before the command ends", first == "one\n" and time.monotonic() - t0 < 0.9,
          (first, time.monotonic() - t0))
    p.wait()

    # timeout= on exec: the client stops waiting at its deadline and reports -1
    # (container_process.py wait: ExecTimeoutError -> returncode -1), and the server kills the
    # command (task_command_router.proto TaskExecStartRequest.timeout_secs: "If the command does
    # not exit within this duration, the command will be killed").
    p = sb.exec("sh", "-c", "echo $$ > /tmp/timed.pid; exec sleep 30", timeout=1)
    t0 = time.monotonic()
    code = p.wait()
    # The client's deadline and the server's kill are the same duration, so either may be seen
    # first: wait() returns -1 when the client's deadline fires first, or the killed command's
    # code (137, SIGKILL) when the server's kill is reported first (a loaded CI machine delays
    # the client's timer). Both are the SDK's behaviour; the command must be gone either way.
    check("exec: timeout= makes wait() return at the deadline (-1, or the kill's 137)",
          code in (-1, 137) and time.monotonic() - t0 < 3, code)
    gone = False
    for _ in range(30):
        c, _, _ = run(sb, "sh", "-c", 'kill -0 "$(cat /tmp/timed.pid)" 2>/dev/null')
        if c != 0:
            gone = True
            break
        time.sleep(0.2)
    check("exec: timeout_secs kills the command in the sandbox", gone)

    # Sandbox.from_id reattaches: SandboxWaitV2(timeout=0), SandboxGetTaskIdV2,
    # SandboxGetCommandRouterAccess (sandbox/_impl_v2.py).
    sb2 = modal.Sandbox.from_id(sb.object_id)
    code, out, _ = run(sb2, "cat", "/tmp/timed.pid")
    check("Sandbox.from_id: exec works on the reattached sandbox", code == 0 and out.strip().isdigit(), repr(out))
    check("Sandbox.poll: None while running", sb2.poll() is None and sb.poll() is None)
    raises(NotFoundError, lambda: modal.Sandbox.from_id("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV").exec("true").wait(), "from_id of an unknown sandbox worked")
    check("Sandbox.from_id of an unknown id is NotFoundError", True)

    # Tags and list (SandboxListV2 pages by before_timestamp, _sandbox.py _list).
    sb.set_tags({"suite": "interop"})
    check("set_tags/get_tags round-trip", sb.get_tags() == {"suite": "interop"}, sb.get_tags())
    listed = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id)]
    check("Sandbox.list(app_id=) lists the sandbox", sb.object_id in listed, listed)
    tagged = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags={"suite": "interop"})]
    check("Sandbox.list(tags=) filters by tag", tagged == [sb.object_id], tagged)
    check("Sandbox.list(tags=) with another value lists nothing",
          list(modal.Sandbox.list(app_id=app.app_id, tags={"suite": "other"})) == [])

    # Names: unique within an app (_sandbox.py create docstring: "AlreadyExistsError: If a
    # sandbox with the same name already exists"); from_name resolves them.
    named = modal.Sandbox.create(app=app, name="interop-named", timeout=60)
    found = modal.Sandbox.from_name(APP, "interop-named")
    check("Sandbox.from_name finds a named sandbox", found.object_id == named.object_id)
    raises(AlreadyExistsError, lambda: modal.Sandbox.create(app=app, name="interop-named", timeout=60), "a second sandbox with the same name was created")
    check("a second running sandbox with the same name is AlreadyExistsError", True)
    named.terminate()

    filesystem(sb)
    handles(sb)
    pty(sb)

    # Entrypoint: the sandbox's own command; its exit code is the sandbox's returncode
    # (_common.py _result_returncode returns result.exitcode for a finished sandbox).
    ep = modal.Sandbox.create("sh", "-c", "exit 7", app=app, timeout=60)
    ep.wait()
    check("Sandbox.create(*args): the entrypoint's exit code is returncode", ep.returncode == 7, ep.returncode)

    # The sandbox's own timeout is the server's (GENERIC_STATUS_TIMEOUT): wait() raises
    # SandboxTimeoutError (_common.py raise_for_wait_result), returncode is 124 (_result_returncode).
    short = modal.Sandbox.create(app=app, timeout=2)
    t0 = time.monotonic()
    raises(SandboxTimeoutError, lambda: short.wait(), "wait() on a timed-out sandbox returned")
    check("a sandbox past its timeout: wait() raises SandboxTimeoutError", 1.5 < time.monotonic() - t0 < 6,
          time.monotonic() - t0)
    check("a timed-out sandbox has returncode 124", short.returncode == 124, short.returncode)

    snapshots(app, sb)
    tunnels(app)

    # terminate(wait=True) returns the returncode of a terminated sandbox: 137 (_result_returncode).
    code = sb.terminate(wait=True)
    check("terminate(wait=True) gives 137", code == 137 and sb.returncode == 137, code)
    raises(NotFoundError, lambda: sb.exec("true").wait(), "exec on a terminated sandbox worked")
    # _task_command_router_client.py exec_wait: "If just the task shuts down, the task
    # command router will return a NOT_FOUND error".
    check("exec on a terminated sandbox is NotFoundError", True)
    print("done", flush=True)


def handles(sb):
    """What execseam's native process handles rely on, through the client's own router client
    (sandbox/_task_command_router_client.py TaskCommandRouterClient, as exec_via_tcr and
    ContainerProcess use it): a start repeated under one exec_id is one exec (exec_via_tcr picks
    exec_id "as a combination of idempotency key/process identifier" and exec_start retries it,
    call_with_retries_on_transient_errors); exec_stdio_read(start_offset=N) resumes at byte N
    (_stream_stdio_with_retries requests the bytes it has), live and after the exit; stdin is
    exactly-once by offset (exec_stdin_write, exec_stdin_status "to support retries from the right
    offset"); exec_poll/exec_wait give a code or a signal (task_command_router.proto
    TaskExecWaitResponse oneof exit_status)."""
    import uuid
    from modal._utils.async_utils import synchronizer
    from modal_proto import api_pb2, task_command_router_pb2 as sr_pb2

    impl = synchronizer._translate_in(sb)._impl
    loop = synchronizer._get_loop(start=True)

    def on_loop(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    async def router():
        task_id = await impl.get_task_id()
        return task_id, await impl.get_command_router_client(task_id)

    task_id, rc = on_loop(router())
    marks = "/tmp/handles-runs"

    def start(exec_id, *args):
        req = sr_pb2.TaskExecStartRequest(
            task_id=task_id, exec_id=exec_id, command_args=list(args),
            stdout_config=sr_pb2.TaskExecStdoutConfig.TASK_EXEC_STDOUT_CONFIG_PIPE,
            stderr_config=sr_pb2.TaskExecStderrConfig.TASK_EXEC_STDERR_CONFIG_PIPE)
        return rc.exec_start(req)

    async def read(exec_id, fd, offset):
        out = b""
        async for item in rc.exec_stdio_read(task_id, exec_id, fd, None, start_offset=offset):
            out += item.data
        return out

    async def twice(exec_id, *args):
        await asyncio.gather(start(exec_id, *args), start(exec_id, *args))
        await start(exec_id, *args)

    eid = str(uuid.uuid4())
    on_loop(twice(eid, "sh", "-c", f"echo x >>{marks}; printf 'a\\000b\\377'; printf E1 >&2; sleep 0.3; printf tail; exit 5"))
    waited = on_loop(rc.exec_wait(task_id, eid))
    check("handles: exec_wait gives the code", waited.WhichOneof("exit_status") == "code" and waited.code == 5, waited)
    _, out, _ = run(sb, "cat", marks)
    check("handles: three exec_start calls under one exec_id (two at once) run one command", out == "x\n", repr(out))
    whole = on_loop(read(eid, api_pb2.FILE_DESCRIPTOR_STDOUT, 0))
    tail = on_loop(read(eid, api_pb2.FILE_DESCRIPTOR_STDOUT, 3))
    err = on_loop(read(eid, api_pb2.FILE_DESCRIPTOR_STDERR, 1))
    check("handles: exec_stdio_read after the exit, from 0 and from a mid offset, byte-exact per stream",
          whole == b"a\x00b\xfftail" and tail == b"\xfftail" and err == b"1", (whole, tail, err))

    eid = str(uuid.uuid4())
    on_loop(start(eid, "sh", "-c", "while IFS= read -r l; do echo got:$l; done; echo end"))
    on_loop(rc.exec_stdin_write(task_id, eid, 0, b"one\ntw", False))
    on_loop(rc.exec_stdin_write(task_id, eid, 0, b"one\ntw", False))  # a retry: dropped
    st = on_loop(rc.exec_stdin_status(task_id, eid))
    check("handles: a repeated stdin write at its offset is accepted once", st.num_bytes_written == 6 and not st.closed, st)
    polled = on_loop(rc.exec_poll(task_id, eid))
    check("handles: exec_poll has no exit_status while it runs", polled.WhichOneof("exit_status") is None, polled)
    on_loop(rc.exec_stdin_write(task_id, eid, 6, b"o\n", True))
    out = on_loop(read(eid, api_pb2.FILE_DESCRIPTOR_STDOUT, 0))
    st = on_loop(rc.exec_stdin_status(task_id, eid))
    check("handles: stdin by offset with eof: exact input, then closed",
          out == b"got:one\ngot:two\nend\n" and st.closed and st.num_bytes_written == 8, (out, st))

    eid = str(uuid.uuid4())
    on_loop(start(eid, "sh", "-c", "kill -TERM $$"))
    waited = on_loop(rc.exec_wait(task_id, eid))
    check("handles: a signal death is exit_status.signal", waited.WhichOneof("exit_status") == "signal" and waited.signal == 15, waited)


def pty(sb):
    """`Sandbox.exec(pty=True)` (modal 1.6.4 sandbox/_sandbox.py: `pty_info = default_pty_info()`,
    i.e. `get_pty_info(shell=True, no_terminate_on_idle_stdin=True)` from the caller's window size
    and TERM; "all output (stdout and stderr from the process) is multiplexed into stdout, and the
    stderr stream is effectively empty"), and the deprecated explicit `pty_info` for a size."""
    from modal_proto import api_pb2

    p = sb.exec("sh", "-c", "test -t 0 -a -t 1 && echo tty; echo err >&2; exit 4", pty=True)
    out, err = p.stdout.read(), p.stderr.read()
    check("pty: the command is on a terminal, stderr merged into stdout, stderr empty",
          out == "tty\r\nerr\r\n" and err == "", (out, err))
    check("pty: wait() gives the exit code", p.wait() == 4, p.returncode)

    info = api_pb2.PTYInfo(enabled=True, winsz_rows=33, winsz_cols=101, env_term="xterm-interop",
                           pty_type=api_pb2.PTYInfo.PTY_TYPE_SHELL, no_terminate_on_idle_stdin=True)
    code, out, _ = run(sb, "sh", "-c", "stty size; echo TERM=$TERM", pty_info=info)
    check("pty: the window size and TERM of pty_info", code == 0 and out == "33 101\r\nTERM=xterm-interop\r\n", out)

    p = sb.exec("cat", pty=True)
    p.stdin.write(b"hello\n")
    p.stdin.drain()
    seen = ""
    for chunk in p.stdout:
        seen += chunk
        if seen.count("hello") >= 2:
            break
    check("pty: a typed line is echoed by the terminal, then by cat", seen == "hello\r\nhello\r\n", repr(seen))
    p.stdin.write(b"\x04")
    p.stdin.drain()
    check("pty: ^D typed ends cat's input", p.wait() == 0, p.returncode)

    p = sb.exec("sh", "-c", "echo ready; exec sleep 100", pty=True)
    for chunk in p.stdout:
        if "ready" in chunk:
            break
    p.stdin.write(b"\x03")
    p.stdin.drain()
    check("pty: ^C typed is the terminal's SIGINT (130)", p.wait() == 130, p.returncode)


def snapshots(app, sb):
    """Sandbox.snapshot_filesystem (_sandbox.py; sandbox/_common.py snapshot_filesystem_via_tcr:
    TaskSnapshotFilesystem on the task router) gives an Image "which can be used to spawn a new
    Sandbox with the same filesystem"; modal.experimental.image_delete (ImageDelete) deletes it,
    "Deletion is irreversible and will prevent Functions/Sandboxes from using the Image"."""
    import modal.experimental

    assert run(sb, "sh", "-c", "printf before > /tmp/state")[0] == 0
    img = sb.snapshot_filesystem()
    check("snapshot_filesystem gives a hydrated image id", img.object_id.startswith("im-"), img.object_id)
    check("the sandbox runs on after snapshot_filesystem", sb.poll() is None)
    assert run(sb, "sh", "-c", "printf after > /tmp/state")[0] == 0
    forked = modal.Sandbox.create(image=img, app=app, timeout=60)
    check("a sandbox from the snapshot image has the files as they were",
          run(forked, "cat", "/tmp/state")[1] == "before")
    assert run(forked, "sh", "-c", "printf forked > /tmp/state")[0] == 0
    check("the source and the sandbox from its snapshot share nothing",
          run(sb, "cat", "/tmp/state")[1] == "after" and run(forked, "cat", "/tmp/state")[1] == "forked")
    directories(sb, forked)
    forked.terminate()
    kept = sb.snapshot_filesystem(ttl=None)  # sends TTL_NO_EXPIRY_SENTINEL (-1)
    check("snapshot_filesystem(ttl=None) is accepted", kept.object_id != img.object_id, kept.object_id)
    modal.experimental.image_delete(img.object_id)
    modal.experimental.image_delete(kept.object_id)
    raises(NotFoundError, lambda: modal.Sandbox.create(image=img, app=app, timeout=60), "a sandbox was created from a deleted image")
    # The status is inferred (the docs say only that a deleted image cannot be used):
    # NOT_FOUND, the client's NotFoundError (_grpc_client.py _STATUS_TO_EXCEPTION).
    check("creating from a deleted snapshot image is NotFoundError", True)


def directories(sb, other):
    """Sandbox.snapshot_directory (sandbox/_common.py snapshot_directory_via_tcr:
    TaskSnapshotDirectory) gives "an `Image` containing the directory contents", and
    Sandbox.mount_image (mount_image_via_tcr: TaskMountDirectory) mounts it in another sandbox:
    "If the path doesn't exist it will be created. If it exists and contains data, the previous
    directory will be replaced by the mount"; unmount_image: "the underlying Sandbox filesystem at
    that path becomes visible again"; `Image.from_scratch()` mounts as an empty image (its id is
    "", _common.py _image_id_for_mount) (docstrings in sandbox/_sandbox.py)."""
    import modal.experimental

    assert run(sb, "sh", "-c", "mkdir -p /project/sub && printf v1 > /project/sub/f")[0] == 0
    image = sb.snapshot_directory("/project")
    check("snapshot_directory gives a hydrated image id", image.object_id.startswith("im-"), image.object_id)
    assert run(sb, "sh", "-c", "printf v2 > /project/sub/f")[0] == 0
    assert run(other, "sh", "-c", "mkdir /project && printf mine > /project/keep")[0] == 0
    other.mount_image("/project", image)
    check("mount_image: another sandbox sees the directory as it was at snapshot_directory",
          run(other, "cat", "/project/sub/f")[1] == "v1")
    check("mount_image replaces what the directory held", run(other, "test", "-e", "/project/keep")[0] == 1)
    assert run(other, "sh", "-c", "printf changed > /project/sub/f")[0] == 0
    other.mount_image("/again", image)  # a path that did not exist: created
    check("a mounted image is a copy: writes under it reach neither the source nor the image",
          run(sb, "cat", "/project/sub/f")[1] == "v2" and run(other, "cat", "/again/sub/f")[1] == "v1")
    other.unmount_image("/project")
    check("unmount_image shows the directory as it was before the mount",
          run(other, "cat", "/project/keep")[1] == "mine")
    other.mount_image("/scratch", modal.Image.from_scratch())
    check("mount_image(Image.from_scratch()) mounts an empty directory",
          run(other, "ls", "-A", "/scratch")[1] == "")
    modal.experimental.image_delete(image.object_id)
    raises(NotFoundError, lambda: other.mount_image("/gone", image), "a deleted image was mounted")
    # Inferred as for create: a deleted image "cannot be used" (modal.experimental.image_delete).
    check("mounting a deleted directory snapshot is NotFoundError", True)
    # Memory snapshots (V2: TaskSnapshotMemory, sandbox/_impl_v2.py _snapshot_memory) need a
    # checkpoint of the processes, which the emulator cannot take: it answers UNIMPLEMENTED, the
    # client's UnimplementedError (_grpc_client.py), never a files-only snapshot called a full one.
    raises(modal.exception.UnimplementedError, lambda: sb._experimental_snapshot(), "a memory snapshot was taken")
    check("_experimental_snapshot (a memory snapshot) is UnimplementedError, never files only", True)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tunnels(app):
    """Sandbox.create(encrypted_ports=, h2_ports=, unencrypted_ports=) (sandbox/_common.py
    open_port_specs: a PortSpec each, unencrypted=True for the last, TUNNEL_TYPE_H2 for h2) and
    Sandbox.tunnels() (SandboxGetTunnelsV2, tunnels_from_protos). _tunnel.py Tunnel: `url` is
    `https://{host}` plus `:{port}` unless 443, the TLS endpoint; `tcp_socket` is the unencrypted
    pair and raises InvalidError on an encrypted-only tunnel; forward(unencrypted=True) "also
    exposes the TCP socket without encryption". The emulator's TLS certificate is trusted through
    SSL_CERT_FILE (set by the Rust side from ModalEmulator::tunnel_ca_pem)."""
    import socket
    import ssl
    import urllib.request

    tls, plain, h2 = free_port(), free_port(), free_port()
    sb = modal.Sandbox.create(app=app, timeout=60, encrypted_ports=[tls], unencrypted_ports=[plain], h2_ports=[h2])
    assert run(sb, "sh", "-c", "mkdir -p /tmp/www && printf 'tunnel ok' > /tmp/www/index.html")[0] == 0
    for port in (tls, plain):
        sb.exec("python3", "-m", "http.server", str(port), "--directory", "/tmp/www")
    t = sb.tunnels()
    check("tunnels(): one Tunnel per declared port", set(t) == {tls, plain, h2}, t)
    url = t[tls].url
    check("Tunnel.url is https://host:port", url.startswith("https://") and t[tls].tls_socket[1] != 0, url)
    body, deadline = None, time.monotonic() + 15
    while body is None:
        try:
            body = urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    check("GET Tunnel.url (TLS, the emulator's certificate trusted) reaches the sandbox's server",
          body == b"tunnel ok", body)
    raises(InvalidError, lambda: t[tls].tcp_socket, "tcp_socket of an encrypted-only tunnel returned")
    check("tcp_socket of an encrypted-only tunnel is InvalidError", True)
    host, port = t[plain].tcp_socket

    def raw_get():
        with socket.create_connection((host, port), timeout=5) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            raw = b""
            while chunk := c.recv(65536):
                raw += chunk
            return raw

    # The plain port's server was started beside the TLS one's, which alone was waited for: until
    # it listens, the tunnel closes (or resets) the connection, so it is waited for too.
    raw, deadline = b"", time.monotonic() + 15
    while not raw:
        try:
            raw = raw_get()
        except ConnectionResetError:
            pass
        if not raw:
            if time.monotonic() > deadline:
                raise AssertionError("the unencrypted port's server never answered")
            time.sleep(0.1)
    check("an unencrypted port's tcp_socket is the raw TCP stream to the sandbox's port",
          raw.startswith(b"HTTP/1.0 200") and raw.endswith(b"tunnel ok"), raw[:80])
    ctx = ssl.create_default_context()
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(t[h2].tls_socket, timeout=5) as c:
        with ctx.wrap_socket(c, server_hostname=t[h2].tls_socket[0]) as s:
            check("an h2_ports tunnel negotiates h2 (TUNNEL_TYPE_H2)", s.selected_alpn_protocol() == "h2",
                  s.selected_alpn_protocol())
            s.sendall(b"x")
            check("a port nothing in the sandbox listens on closes the connection", s.recv(1) == b"")
    sb.terminate()
    sb.wait(raise_on_termination=False)
    raises(OSError, lambda: urllib.request.urlopen(url, timeout=5), "a terminated sandbox's tunnel answered")
    check("a terminated sandbox's tunnel is closed", True)


def tunnel_ca():
    """`execseam emulate modal` writes the certificate its tunnels present and prints
    SSL_CERT_FILE naming it (the caller runs this with the environment the CLI printed): with it,
    Python's default ssl context (which reads SSL_CERT_FILE) verifies Tunnel.url, as a user's
    client would; without it (certifi's roots only) the same URL fails verification."""
    import ssl
    import urllib.request

    import certifi

    app = modal.App.lookup(APP, create_if_missing=True)
    port = free_port()
    sb = modal.Sandbox.create("python3", "-m", "http.server", str(port), "--bind", "127.0.0.1",
                              app=app, timeout=60, encrypted_ports=[port])
    url = sb.tunnels()[port].url
    status, deadline = None, time.monotonic() + 15
    while status is None:
        try:
            status = urllib.request.urlopen(url, timeout=5).status
        except OSError as e:
            # Only "not listening yet" is waited out; a TLS failure is the answer.
            if time.monotonic() > deadline or isinstance(getattr(e, "reason", None), ssl.SSLError):
                raise
            time.sleep(0.1)
    check("GET Tunnel.url verifies with the certificate execseam emulate printed (SSL_CERT_FILE)", status == 200,
          status)
    e = raises(urllib.error.URLError, lambda: urllib.request.urlopen(url, timeout=5, context=ssl.create_default_context(cafile=certifi.where())), "Tunnel.url verified without the emulator's certificate")
    check("without it, the tunnel's certificate does not verify",
          isinstance(e.reason, ssl.SSLCertVerificationError), e)
    sb.terminate()
    print("done", flush=True)


def filesystem(sb):
    fs = sb.filesystem
    # Every operation execs /__modal/.bin/modal-sandbox-fs-tools (sandbox/_filesystem.py).
    fs.make_directory("/root/d/e")
    fs.write_text("hello\n", "/root/d/e/a.txt")
    check("filesystem: write_text then read_text", fs.read_text("/root/d/e/a.txt") == "hello\n")
    data = bytes(range(256)) * 1000
    fs.write_bytes(data, "/root/d/b.bin")
    check("filesystem: write_bytes then read_bytes, binary exact", fs.read_bytes("/root/d/b.bin") == data)
    code, out, _ = run(sb, "cat", "/root/d/e/a.txt")
    check("filesystem: a file written through the API is seen by commands at the same path", out == "hello\n")
    run(sb, "sh", "-c", "printf from-exec > /root/d/c.txt; ln -s c.txt /root/d/link")
    check("filesystem: a file written by a command is read through the API", fs.read_text("/root/d/c.txt") == "from-exec")

    entries = fs.list_files("/root/d")
    names = [e.name for e in entries]
    check("filesystem: list_files names every entry", sorted(names) == ["b.bin", "c.txt", "e", "link"], names)
    by = {e.name: e for e in entries}
    check("filesystem: list_files types", by["e"].is_dir() and by["b.bin"].is_file() and by["link"].is_symlink())
    check("filesystem: list_files sizes and absolute paths", by["b.bin"].size == len(data) and by["b.bin"].path == "/root/d/b.bin",
          (by["b.bin"].size, by["b.bin"].path))
    check("filesystem: a symlink carries its target", by["link"].symlink_target == "c.txt", by["link"].symlink_target)
    st = fs.stat("/root/d/e/a.txt")
    check("filesystem: stat of a file", st.is_file() and st.size == 6 and st.name == "a.txt" and st.owner == "root",
          st)
    check("filesystem: stat mode and time", (st.mode & 0o170000) == 0o100000 and st.modified_time > 1e9, st)
    check("filesystem: stat of a directory", fs.stat("/root/d").is_dir())

    raises(SandboxFilesystemNotFoundError, lambda: fs.read_text("/root/nope.txt"), "reading a missing file worked")
    check("filesystem: reading a missing file is SandboxFilesystemNotFoundError", True)
    raises(SandboxFilesystemIsADirectoryError, lambda: fs.read_bytes("/root/d"), "reading a directory worked")
    check("filesystem: reading a directory is SandboxFilesystemIsADirectoryError", True)
    raises(SandboxFilesystemNotADirectoryError, lambda: fs.list_files("/root/d/c.txt"), "listing a file worked")
    check("filesystem: listing a file is SandboxFilesystemNotADirectoryError", True)
    raises(SandboxFilesystemPathAlreadyExistsError, lambda: fs.make_directory("/root/d", create_parents=False), "make_directory of an existing path worked")
    check("filesystem: make_directory(create_parents=False) of an existing path is PathAlreadyExists", True)
    raises(SandboxFilesystemNotFoundError, lambda: fs.stat("/root/none"), "stat of a missing path worked")
    check("filesystem: stat of a missing path is SandboxFilesystemNotFoundError", True)
    raises(SandboxFilesystemDirectoryNotEmptyError, lambda: fs.remove("/root/d"), "removing a non-empty directory worked")
    check("filesystem: remove of a non-empty directory is DirectoryNotEmpty", True)
    raises(SandboxFilesystemIsADirectoryError, lambda: fs.write_text("x", "/root/d"), "writing over a directory worked")
    # The helper exits early; the client handles the refused stdin (ConflictError) and maps
    # the helper's error (sandbox/_filesystem.py _exec_fs_tool_write).
    check("filesystem: writing over a directory is SandboxFilesystemIsADirectoryError", True)
    raises(InvalidError, lambda: fs.read_text("relative/path"), "a relative path worked")
    check("filesystem: a relative path is InvalidError before any call", True)

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "up.bin")
        big = os.urandom(600 * 1024)  # more than two 256 KiB TaskExecStdinWriteStream chunks
        with open(src, "wb") as f:
            f.write(big)
        fs.copy_from_local(src, "/tmp/up/up.bin")
        dst = os.path.join(tmp, "down.bin")
        fs.copy_to_local("/tmp/up/up.bin", dst)
        with open(dst, "rb") as f:
            check("filesystem: copy_from_local then copy_to_local (streamed stdin), exact", f.read() == big)

    fs.remove("/root/d/c.txt")
    check("filesystem: remove of a file", "c.txt" not in [e.name for e in fs.list_files("/root/d")])
    fs.remove("/root/d", recursive=True)
    raises(SandboxFilesystemNotFoundError, lambda: fs.stat("/root/d"), "the removed directory is still there")
    check("filesystem: remove(recursive=True) of a directory", True)

    # The helper is a program in the sandbox, reachable by any exec.
    code, _, err = run(sb, FS_TOOLS, '{"Stat": {"path": "/nonexistent"}}')
    check("filesystem: the helper is in the sandbox and reports errors as JSON on stderr",
          code == 1 and '"error_kind": "NotFound"' in err, (code, err))


def v1():
    # MODAL_SANDBOX_V2=0 selects the V1 backend (sandbox/_sandbox.py, config `sandbox_v2`):
    # SandboxCreate, SandboxGetTaskId, TaskGetCommandRouterAccess, SandboxWait, SandboxTerminate.
    app = modal.App.lookup(APP, create_if_missing=True)
    sb = modal.Sandbox.create(app=app, timeout=60)
    check("V1: Sandbox.create returns a V1-shaped id", is_v1_id(sb.object_id), sb.object_id)
    code, out, err = run(sb, "sh", "-c", "printf out; printf err >&2; exit 4")
    check("V1: exec through the task command router", (code, out, err) == (4, "out", "err"), (code, out, err))
    again = modal.Sandbox.from_id(sb.object_id)
    check("V1: from_id and poll", again.poll() is None)
    code, out, _ = run(again, "echo", "reattached")
    check("V1: exec on the reattached sandbox", out == "reattached\n")
    check("V1: terminate(wait=True) gives 137", sb.terminate(wait=True) == 137)
    print("done", flush=True)


def entrypoint():
    app = modal.App.lookup(APP, create_if_missing=True)

    # The first example of the Sandbox.create docstring (sandbox/_sandbox.py): the entrypoint's
    # stdout, read through TaskCommandRouter/SandboxStdioReadV2 (sandbox/_impl_v2.py make_stdio),
    # which "serves both live reads and post-exit reads" (_task_command_router_client.py
    # sandbox_stdio_read): `echo` may well have exited before the read.
    sb = modal.Sandbox.create("echo", "hello world", app=app)
    out = sb.stdout.read()
    check("entrypoint: Sandbox.create('echo', 'hello world').stdout.read() (the docstring's example)",
          out == "hello world\n", repr(out))
    check("entrypoint: wait() gives its exit code", sb.wait(raise_on_termination=False) is None and sb.returncode == 0,
          sb.returncode)

    # stdin through SandboxStdinWriteV2 (io_streams.py _StreamWriterThroughCommandRouterSandbox):
    # offset = bytes drained so far, eof on write_eof() + drain().
    sb = modal.Sandbox.create(
        "bash", "-c", 'while IFS= read -r l; do echo "got:$l"; done; echo bye >&2; exit 7', app=app)
    sb.stdin.write(b"a\n")
    sb.stdin.drain()
    sb.stdin.write("b c\n")
    sb.stdin.write_eof()
    sb.stdin.drain()
    # A second EOF is ignored by the router ("the command router will ignore the second EOF",
    # io_streams.py _StreamWriterThroughCommandRouterBuffer.drain).
    sb.stdin.drain()
    out, err = sb.stdout.read(), sb.stderr.read()
    check("entrypoint: stdin writes reach it in order, EOF ends its input", out == "got:a\ngot:b c\n", repr(out))
    check("entrypoint: stderr is its own stream", err == "bye\n", repr(err))
    sb.wait(raise_on_termination=False)
    check("entrypoint: its exit code is the sandbox's returncode", sb.returncode == 7, sb.returncode)
    raises(ValueError, lambda: sb.stdin.write(b"late"), "a write after write_eof() was accepted")
    # io_streams.py write(): "Stdin is closed. Cannot write to it."
    check("entrypoint: a write after write_eof() is refused by the client", True)

    # stdin of an entrypoint that already exited: FAILED_PRECONDITION is ConflictError, which the
    # writer re-raises as ValueError (io_streams.py _StreamWriterThroughCommandRouterSandbox).
    sb = modal.Sandbox.create("true", app=app)
    sb.wait(raise_on_termination=False)
    sb.stdin.write(b"x")
    raises(ValueError, lambda: sb.stdin.drain(), "stdin of an exited entrypoint accepted a write")
    check("entrypoint: stdin after it exited is ValueError", True)

    # Live reads: lines arrive while it runs, and the read ends when it exits.
    sb = modal.Sandbox.create("sh", "-c", "echo one; sleep 1; echo two", app=app)
    t0 = time.monotonic()
    lines = []
    for line in sb.stdout:
        lines.append((line, time.monotonic() - t0))
    check("entrypoint: stdout is live (the first line before the command ends)",
          [l for l, _ in lines] == ["one\n", "two\n"] and lines[0][1] < lines[1][1] - 0.5, lines)

    # The image's ENV and WORKDIR (modal/_image.py env(): ["FROM base", f"ENV {k}={shlex.quote(v)}"],
    # workdir(): ["FROM base", f"WORKDIR {shlex.quote(path)}"], over base_images={"base": parent}),
    # applied as Docker does: shlex's single quotes are literal (no $ expansion).
    image = (
        modal.Image.debian_slim()
        .env({"GREETING": "it's a b", "LITERAL": "$HOME", "LAYER": "image"})
        .workdir("/srv/app")
        .env({"SECOND": "later layer"})
    )
    sb = modal.Sandbox.create(
        "sh", "-c", 'printf "%s|%s|%s|%s|%s|%s" "$GREETING" "$LITERAL" "$SECOND" "$LAYER" "$(pwd)" "$PATH"',
        image=image, env={"LAYER": "create"}, app=app)
    out = sb.stdout.read()
    check("image: ENV reaches the entrypoint, WORKDIR is its cwd, Sandbox.create(env=) wins",
          out == "it's a b|$HOME|later layer|create|/srv/app|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          repr(out))
    sb = modal.Sandbox.create(image=image, app=app, timeout=60)
    code, out, _ = run(sb, "sh", "-c", 'echo "$GREETING|$(pwd)"')
    check("image: ENV and WORKDIR apply to every exec", out == "it's a b|/srv/app\n", repr(out))
    code, out, _ = run(sb, "sh", "-c", 'echo "$GREETING"', env={"GREETING": "exec"})
    check("image: an exec's env wins over the image's ENV", out == "exec\n", repr(out))
    code, out, _ = run(sb, "pwd", workdir="/tmp")
    check("image: an exec's workdir wins over WORKDIR", out == "/tmp\n", repr(out))
    sb.terminate()
    sb = modal.Sandbox.create(image=image, app=app, timeout=60, workdir="/opt")
    code, out, _ = run(sb, "pwd")
    check("image: Sandbox.create(workdir=) wins over WORKDIR", out == "/opt\n", repr(out))
    sb.terminate()
    print("done", flush=True)


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def retention():
    app = modal.App.lookup(APP, create_if_missing=True)
    captured = _Capture()
    logging.getLogger("modal-client").addHandler(captured)
    sb = modal.Sandbox.create("sh", "-c", "head -c 4990 /dev/zero | tr '\\0' x; printf 0123456789", app=app)
    sb.wait(raise_on_termination=False)
    out = sb.stdout.read()
    # Only the most recent 1000 bytes are retained: the first message starts at offset 4000
    # (SandboxStdioReadV2Response.starting_offset) and the client logs how much it missed
    # (io_streams.py _stdio_stream_from_sandbox_command_router).
    check("retention: only the most recent bytes are read", out == "x" * 990 + "0123456789", (len(out), out[-12:]))
    check("retention: the client reports the dropped bytes",
          any("dropped 4000 bytes" in m for m in captured.messages), captured.messages)
    print("done", flush=True)


def fault(kind):
    app = modal.App.lookup(APP, create_if_missing=True)
    if kind == "create-auth":
        try:
            modal.Sandbox.create(app=app, timeout=30)
            print(f"FAULT {kind} no-exception", flush=True)
        except AuthError as e:
            # UNAUTHENTICATED is AuthError (_grpc_client.py _STATUS_TO_EXCEPTION) and is not
            # retried (grpc_utils.py RETRYABLE_GRPC_STATUS_CODES).
            print(f"FAULT {kind} AuthError", flush=True)
        return
    if kind == "create-500":
        before = len(list(modal.Sandbox.list(app_id=app.app_id)))
        sb = modal.Sandbox.create(app=app, timeout=30)
        after = len(list(modal.Sandbox.list(app_id=app.app_id)))
        # INTERNAL is retried (RETRYABLE_GRPC_STATUS_CODES) with the same x-idempotency-key
        # (grpc_utils.py _retry_transient_errors): one sandbox results.
        print(f"FAULT {kind} created {after - before}", flush=True)
        sb.terminate()
        return
    sb = modal.Sandbox.create(app=app, timeout=60)
    try:
        if kind == "exec-503":
            t0 = time.monotonic()
            code, out, _ = run(sb, "sh", "-c", "echo ran >> /tmp/once; cat /tmp/once")
            # TaskExecStart is retried on UNAVAILABLE with the same exec_id
            # (_task_command_router_client.py exec_start, call_with_retries_on_transient_errors).
            print(f"FAULT {kind} code {code} runs {out.count('ran')}", flush=True)
        elif kind == "exec-429":
            t0 = time.monotonic()
            code, out, _ = run(sb, "echo", "throttled")
            # RESOURCE_EXHAUSTED with an RPCRetryPolicy detail is retried after retry_after_secs
            # (call_with_retries_on_transient_errors, server_retry_after_secs).
            print(f"FAULT {kind} code {code} waited {time.monotonic() - t0 >= 1.0}", flush=True)
        elif kind == "exec-vanish":
            p = sb.exec("sh", "-c", "echo start; sleep 10; echo end")
            try:
                p.stdout.read()
                code = p.wait()
                print(f"FAULT {kind} no-exception code {code}", flush=True)
            except NotFoundError:
                print(f"FAULT {kind} NotFoundError", flush=True)
        elif kind == "exec-auth":
            try:
                run(sb, "true")
                print(f"FAULT {kind} no-exception", flush=True)
            except AuthError:
                # One UNAUTHENTICATED from the router is retried once with a refreshed JWT only
                # when the JWT is about to expire (_refresh_jwt); otherwise the retry reuses it.
                print(f"FAULT {kind} AuthError", flush=True)
        else:
            raise SystemExit(f"unknown fault {kind}")
    finally:
        try:
            sb.terminate()
        except Exception:
            pass


if __name__ == "__main__":
    phase = sys.argv[1] if len(sys.argv) > 1 else "main"
    if phase == "main":
        main()
    elif phase == "v1":
        v1()
    elif phase == "entrypoint":
        entrypoint()
    elif phase == "retention":
        retention()
    elif phase == "tunnel-ca":
        tunnel_ca()
    elif phase == "fault":
        fault(sys.argv[2])
    else:
        raise SystemExit(f"unknown phase {phase}")
