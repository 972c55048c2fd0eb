"""The official Daytona Python SDK against the execseam Daytona emulator.

Run by crates/emulator-daytona/tests/interop.rs with DAYTONA_API_URL / DAYTONA_API_KEY set, and
EXPECT_HOME / EXPECT_TMP: where the sandbox's home and /tmp appear to commands (the same paths
unless the emulator runs without mount namespaces). Prints one line per check and "OK" at the end;
any failed assertion is a non-zero exit.
"""

import asyncio
import http.client
import os
import re
import time
import urllib.parse

from daytona import (
    CodeRunParams,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaError,
    DaytonaNotFoundError,
    FileUpload,
    ListSandboxesQuery,
    SandboxState,
    SessionExecuteRequest,
)

HOME = os.environ["EXPECT_HOME"]
TMP = os.environ["EXPECT_TMP"]


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok {name}")


daytona = Daytona()
sandbox = daytona.create()
check("create", sandbox.id and sandbox.state == "started", sandbox.state)
again = daytona.get(sandbox.id)
check("get", again.id == sandbox.id)

# process.exec: merged output, non-zero exit is a result (no exception).
r = sandbox.process.exec("echo hi; echo err >&2; exit 3", cwd=TMP, timeout=10)
check("exec merged", r.exit_code == 3 and r.result == "hi\nerr\n", repr(r))
r = sandbox.process.exec("pwd; echo $HOME; whoami >/dev/null 2>&1; echo $USER")
check("exec default cwd and env", r.result == f"{HOME}\n{HOME}\ndaytona\n", repr(r.result))
r = sandbox.process.exec("printf '%s' \"$GREETING\"", env={"GREETING": "hé llo"})
check("exec env", r.result == "hé llo", repr(r.result))
r = sandbox.process.exec("true", cwd="/nonexistent-dir")
check("exec bad cwd", r.exit_code == -1 and "no such file" in r.result, repr(r))
try:
    sandbox.process.exec("sleep 5", timeout=1)
    check("exec timeout", False, "no error")
except DaytonaError as e:
    check("exec timeout", e.status_code == 408, repr(e))
# The daemon kills the command at the deadline (`toolbox/process/execute.go`: a timer of its own
# kills the process, whether or not the client still waits), not only answers 408.
try:
    sandbox.process.exec(f"sleep 2; touch {TMP}/after-deadline", timeout=1)
except DaytonaError:
    pass
time.sleep(2.5)
r = sandbox.process.exec(f"test -e {TMP}/after-deadline && echo ran || echo killed")
check("exec timeout kills the command", r.result == "killed\n", repr(r.result))

# code_run: merged, argv joined unquoted as the daemon does.
r = sandbox.process.code_run(
    'import sys\nprint("py", sys.argv[1:])\nprint("to stderr", file=sys.stderr)',
    params=CodeRunParams(argv=["a", "b c"]),
)
check("code_run", r.exit_code == 0 and r.result == "py ['a', 'b', 'c']\nto stderr\n", repr(r.result))

# Sessions: state persists, stdout/stderr separated, line-labelled output.
sandbox.process.create_session("s1")
r = sandbox.process.execute_session_command("s1", SessionExecuteRequest(command=f"export FOO=bar; cd {TMP}"))
check("session sync 1", r.exit_code == 0 and r.cmd_id, repr(r))
r = sandbox.process.execute_session_command(
    "s1", SessionExecuteRequest(command='echo "$FOO $(pwd)"; echo bad >&2; printf tail')
)
check(
    "session sync split",
    r.exit_code == 0 and r.stdout == f"bar {TMP}\ntail\n" and r.stderr == "bad\n",
    repr(r),
)
check("session raw output has markers", "\x01\x01\x01" in (r.output or ""), repr(r.output))
r = sandbox.process.execute_session_command("s1", SessionExecuteRequest(command="sh -c 'exit 7'"))
check("session exit code", r.exit_code == 7, repr(r))

# Async with input.
r = sandbox.process.execute_session_command(
    "s1",
    SessionExecuteRequest(command='read line; echo "got $line"; echo e2 >&2', run_async=True),
)
cid = r.cmd_id
check("session async", cid and r.exit_code is None, repr(r))
cmd = sandbox.process.get_session_command("s1", cid)
check("get_session_command running", cmd.exit_code is None, repr(cmd))
sandbox.process.send_session_command_input("s1", cid, "hello\n")
deadline = time.time() + 20
while time.time() < deadline:
    cmd = sandbox.process.get_session_command("s1", cid)
    if cmd.exit_code is not None:
        break
    time.sleep(0.1)
check("get_session_command done", cmd.exit_code == 0, repr(cmd))
logs = sandbox.process.get_session_command_logs("s1", cid)
check("logs split", logs.stdout == "got hello\n" and logs.stderr == "e2\n", repr(logs))

# Streaming logs over the WebSocket.
r = sandbox.process.execute_session_command(
    "s1",
    SessionExecuteRequest(
        command="for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.1; done", run_async=True
    ),
)
outs, errs = [], []
asyncio.run(sandbox.process.get_session_command_logs_async("s1", r.cmd_id, outs.append, errs.append))
check("logs streamed", "".join(outs) == "o1\no2\no3\n" and "".join(errs) == "e1\ne2\ne3\n", repr((outs, errs)))

session = sandbox.process.get_session("s1")
check("get_session", session.session_id == "s1" and len(session.commands) == 5, repr(session))
check("list_sessions", [s.session_id for s in sandbox.process.list_sessions()] == ["s1"])
sandbox.process.delete_session("s1")
try:
    sandbox.process.get_session("s1")
    check("deleted session", False, "still there")
except DaytonaNotFoundError:
    check("deleted session", True)

# The daemon writes a session command's exit code only after its log labellers drained
# (apps/daemon/pkg/session/execute.go cmdWrapperFormat at v0.190.0: "Write exit code only after
# labelers have flushed all output to the log file"), so a synchronous answer holds the whole
# log, and a background child that keeps the command's stdout open holds the answer until it
# closes it.
sandbox.process.create_session("s2")
t0 = time.time()
r = sandbox.process.execute_session_command(
    "s2", SessionExecuteRequest(command="(sleep 1.5; echo late) & echo early")
)
took = time.time() - t0
check(
    "sync exit after the log drained",
    r.exit_code == 0 and r.stdout == "early\nlate\n" and took >= 1.4,
    repr((r, took)),
)
sandbox.process.delete_session("s2")

# Files.
sandbox.fs.upload_file(b"hello world\nsecond line\n", f"{TMP}/dir/a.txt")
sandbox.fs.upload_files(
    [
        FileUpload(b"\x00\xffbin hello", f"{TMP}/dir/b.bin"),
        FileUpload(b"x hello", f"{TMP}/dir/sub/c.txt"),
    ]
)
check("download binary", sandbox.fs.download_file(f"{TMP}/dir/b.bin") == b"\x00\xffbin hello")
check("download text", sandbox.fs.download_file(f"{TMP}/dir/a.txt") == b"hello world\nsecond line\n")
entries = sandbox.fs.list_files(f"{TMP}/dir")
check(
    "list",
    [(e.name, e.is_dir) for e in entries] == [("a.txt", False), ("b.bin", False), ("sub", True)],
    repr(entries),
)
info = sandbox.fs.get_file_info(f"{TMP}/dir/a.txt")
check("info", info.size == 24 and info.permissions == "0644" and not info.is_dir, repr(info))
matches = sandbox.fs.find_files(f"{TMP}/dir", "hello")
check(
    "find",
    sorted((m.file, m.line, m.content) for m in matches)
    == [(f"{TMP}/dir/a.txt", 1, "hello world"), (f"{TMP}/dir/sub/c.txt", 1, "x hello")],
    repr(matches),
)
found = sandbox.fs.search_files(f"{TMP}/dir", "*.txt")
check("search", sorted(found.files) == [f"{TMP}/dir/a.txt", f"{TMP}/dir/sub/c.txt"], repr(found))
r = sandbox.process.exec(f"cat {TMP}/dir/a.txt; printf made > {TMP}/dir/from-cmd")
check("files and commands share the filesystem", r.result == "hello world\nsecond line\n", repr(r.result))
check("and back", sandbox.fs.download_file(f"{TMP}/dir/from-cmd") == b"made")
try:
    sandbox.fs.download_file(f"{TMP}/nope")
    check("download missing", False, "no error")
except DaytonaNotFoundError:
    check("download missing", True)

# move_files: `POST /files/move?source=&destination=`; replace_in_files: `POST /files/replace`
# `{files, pattern, newValue}`; set_file_permissions: `POST /files/permissions?path=&mode=&owner=`
# (`daytona_toolbox_api_client/api/file_system_api.py`; the daemon's `toolbox/fs/move_file.go`,
# `replace_in_files.go`, `set_file_permissions.go`).
sandbox.fs.move_files(f"{TMP}/dir/a.txt", f"{TMP}/dir/moved.txt")
check(
    "move_files",
    sandbox.fs.download_file(f"{TMP}/dir/moved.txt") == b"hello world\nsecond line\n"
    and sandbox.process.exec(f"test -e {TMP}/dir/a.txt; echo $?").result == "1\n",
)
sandbox.fs.move_files(f"{TMP}/dir/sub", f"{HOME}/moved-sub")
check("move_files a directory across mounts", sandbox.fs.download_file(f"{HOME}/moved-sub/c.txt") == b"x hello")
try:
    sandbox.fs.move_files(f"{TMP}/dir/b.bin", f"{TMP}/dir/moved.txt")
    check("move onto an existing file", False, "no error")
except DaytonaError as e:
    check("move onto an existing file", e.status_code == 409, repr(e))
try:
    sandbox.fs.move_files(f"{TMP}/dir/nope", f"{TMP}/dir/x")
    check("move a missing file", False, "no error")
except DaytonaNotFoundError:
    check("move a missing file", True)
results = sandbox.fs.replace_in_files([f"{TMP}/dir/moved.txt", f"{TMP}/dir/missing.txt"], "line", "LINE")
check(
    "replace_in_files",
    [(r.file, r.success) for r in results] == [(f"{TMP}/dir/moved.txt", True), (f"{TMP}/dir/missing.txt", False)]
    and "no such file or directory" in (results[1].error or ""),
    repr(results),
)
check("replaced", sandbox.fs.download_file(f"{TMP}/dir/moved.txt") == b"hello world\nsecond LINE\n")
sandbox.fs.set_file_permissions(f"{TMP}/dir/moved.txt", mode="750")
check("set_file_permissions mode", sandbox.fs.get_file_info(f"{TMP}/dir/moved.txt").permissions == "0750")
check(
    "the mode is the file's own",
    sandbox.process.exec(f"stat -c %a {TMP}/dir/moved.txt").result == "750\n",
)
sandbox.fs.set_file_permissions(f"{TMP}/dir/moved.txt", owner="daytona", group="daytona")
check(
    "set_file_permissions owner",
    sandbox.process.exec(f"stat -c %U:%G {TMP}/dir/moved.txt").result == "daytona:daytona\n",
)
try:
    sandbox.fs.set_file_permissions(f"{TMP}/dir/moved.txt", mode="9z")
    check("bad mode", False, "no error")
except DaytonaError as e:
    check("bad mode", e.status_code == 400, repr(e))

# Labels: `PUT /sandbox/{id}/labels` replaces the set (`sandbox.service.ts` `replaceLabels`);
# list filters by them (`GET /sandbox?labels=<json>`, `ListSandboxesResponse`).
other = daytona.create()
labels = sandbox.set_labels({"team": "a", "tier": "gold"})
check("set_labels", labels == {"team": "a", "tier": "gold"}, repr(labels))
check("labels kept", daytona.get(sandbox.id).labels == {"team": "a", "tier": "gold"})
listed = [s.id for s in daytona.list()]
check("list all", sandbox.id in listed and other.id in listed, repr(listed))
listed = [s.id for s in daytona.list(ListSandboxesQuery(labels={"team": "a"}))]
check("list by label", listed == [sandbox.id], repr(listed))
check("list by a label nobody has", list(daytona.list(ListSandboxesQuery(labels={"team": "b"}))) == [])

# set_autostop_interval: `POST /sandbox/{id}/autostop/{minutes}`; the emulator's test shortens
# a minute to a second (EXPECT_MINUTE_SECS), so one minute idle stops it.
sandbox.set_autostop_interval(0)
check("autostop 0", daytona.get(sandbox.id).auto_stop_interval == 0)
other.set_autostop_interval(1)
check("autostop set", daytona.get(other.id).auto_stop_interval == 1)
time.sleep(float(os.environ["EXPECT_MINUTE_SECS"]) * 2 + 1)
check("autostop stopped the idle sandbox", daytona.get(other.id).state == "stopped", daytona.get(other.id).state)
check("autostop 0 never stops", daytona.get(sandbox.id).state == "started")
daytona.delete(other)

# stop/start (`sandbox.service.ts` `stop`/`start`): the processes die, the files stay; the
# toolbox of a stopped sandbox is refused by the runner (400 "Is the Sandbox started?").
sandbox.process.create_session("bg")
sandbox.process.execute_session_command("bg", SessionExecuteRequest(command="sleep 300", run_async=True))
sandbox.stop()
check("stop", sandbox.state == "stopped" and daytona.get(sandbox.id).state == "stopped", sandbox.state)
try:
    sandbox.process.exec("echo hi")
    check("exec on a stopped sandbox", False, "no error")
except DaytonaError as e:
    check("exec on a stopped sandbox", e.status_code == 400 and "started" in str(e), repr(e))
listed = [s.id for s in daytona.list(ListSandboxesQuery(states=[SandboxState.STOPPED]))]
check("list by state", listed == [sandbox.id], repr(listed))
try:
    sandbox.stop()
    check("stop a stopped sandbox", False, "no error")
except DaytonaError as e:
    check("stop a stopped sandbox", e.status_code == 400, repr(e))
sandbox.archive()
sandbox.refresh_data()
check("archive", sandbox.state == "archived", sandbox.state)
sandbox.start()
check("start", sandbox.state == "started", sandbox.state)
r = sandbox.process.exec("pgrep -f 'sleep 300' >/dev/null && echo alive || echo gone")
check("stop killed the processes", r.result == "gone\n", repr(r.result))
check("files survive stop and start", sandbox.fs.download_file(f"{TMP}/dir/moved.txt") == b"hello world\nsecond LINE\n")

MINUTE = float(os.environ["EXPECT_MINUTE_SECS"])


def expect_400(name, fn, words):
    try:
        fn()
        check(name, False, "no error")
    except DaytonaError as e:
        check(name, e.status_code == 400 and words in str(e), repr(e))


def gone(sid):
    try:
        daytona.get(sid)
        return False
    except DaytonaNotFoundError:
        return True


# Auto-archive: `POST /sandbox/{id}/autoarchive/{minutes}` (`sandbox.service.ts`
# `setAutoArchiveInterval`, `resolveAutoArchiveInterval`: 0 is the maximum, `MAX_AUTO_ARCHIVE_INTERVAL`
# = 43200 by default in `apps/api/src/config/configuration.ts`, larger values are capped);
# `auto-archive-check` (`sandbox.manager.ts`) archives a sandbox stopped for longer than it.
sandbox.set_auto_archive_interval(0)
check("auto-archive 0 is the maximum", daytona.get(sandbox.id).auto_archive_interval == 43200)
sandbox.set_auto_archive_interval(10**6)
check("auto-archive is capped at the maximum", daytona.get(sandbox.id).auto_archive_interval == 43200)
sandbox.set_auto_archive_interval(60)
check("set_auto_archive_interval", daytona.get(sandbox.id).auto_archive_interval == 60)
arch = daytona.create(CreateSandboxFromSnapshotParams(auto_archive_interval=1))
check("create with auto_archive_interval", arch.auto_archive_interval == 1, repr(arch.auto_archive_interval))
arch.fs.upload_file(b"kept", f"{HOME}/kept.txt")
arch.stop()
time.sleep(MINUTE * 2 + 1)
check("auto-archive archived the stopped sandbox", daytona.get(arch.id).state == "archived", daytona.get(arch.id).state)
expect_400("exec on an archived sandbox", lambda: arch.process.exec("echo hi"), "started")
arch.start()
check("an archived sandbox starts", arch.state == "started", arch.state)
check("with its files", arch.fs.download_file(f"{HOME}/kept.txt") == b"kept")
daytona.delete(arch)

# Auto-delete: `POST /sandbox/{id}/autodelete/{minutes}` (`setAutoDeleteInterval`, stored as
# given: negative disables, 0 deletes on stop: `stop` sets `desiredState: DESTROYED`);
# `auto-delete-check` destroys a sandbox stopped for longer than it.
eph = daytona.create(CreateSandboxFromSnapshotParams(ephemeral=True))
check("ephemeral is auto_delete_interval 0", eph.auto_delete_interval == 0, repr(eph.auto_delete_interval))
eph.stop()
check("stopping an ephemeral sandbox deletes it", gone(eph.id))
dl = daytona.create()
check("auto-delete is off by default", dl.auto_delete_interval == -1, repr(dl.auto_delete_interval))
dl.set_auto_delete_interval(1)
check("set_auto_delete_interval", daytona.get(dl.id).auto_delete_interval == 1)
dl.stop()
check("not deleted before its interval", not gone(dl.id))
time.sleep(MINUTE * 2 + 1)
check("auto-delete deleted the stopped sandbox", gone(dl.id))

# Network settings: `networkBlockAll`/`networkAllowList` on create, `POST
# /sandbox/{id}/network-settings` (`sandbox.service.ts` `updateNetworkSettings`: blocking all
# clears the allow list, an allow list unblocks, unblocking clears the list), each list checked
# by `validateNetworkAllowList` (`apps/api/src/sandbox/utils/network-validation.util.ts`) with its
# message as a 400. The emulator keeps the policy but does not filter traffic (documented).
net = daytona.create(CreateSandboxFromSnapshotParams(network_block_all=True))
check("create network_block_all", net.network_block_all is True and daytona.get(net.id).network_block_all is True)
net.update_network_settings(network_allow_list="10.0.0.0/8, 192.168.1.0/24")
got = daytona.get(net.id)
check(
    "an allow list unblocks",
    net.network_block_all is False and got.network_allow_list == "10.0.0.0/8, 192.168.1.0/24" and got.network_block_all is False,
    repr((net.network_block_all, got.network_allow_list)),
)
net.update_network_settings(network_block_all=True)
check("blocking all clears the allow list", net.network_block_all is True and net.network_allow_list is None)
net.update_network_settings(network_allow_list="10.1.0.0/16")
net.update_network_settings(network_block_all=False)
check("unblocking clears the allow list", net.network_block_all is False and daytona.get(net.id).network_allow_list is None)
expect_400("an entry without a prefix", lambda: net.update_network_settings(network_allow_list="10.0.0.1"), "Missing CIDR prefix length")
expect_400("a prefix over 32", lambda: net.update_network_settings(network_allow_list="10.0.0.0/33"), "Prefix must be between 0 and 32")
expect_400(
    "more than 10 networks",
    lambda: net.update_network_settings(network_allow_list=",".join(f"10.0.{i}.0/24" for i in range(11))),
    "more than 10 networks",
)
expect_400(
    "create with a bad allow list",
    lambda: daytona.create(CreateSandboxFromSnapshotParams(network_allow_list="300.1.1.1/8")),
    "Must be a valid IPv4 address",
)
daytona.delete(net)

# recover: `POST /sandbox/{id}/recover` (`sandbox.service.ts` `recover`/`recoverInPlace`): only a
# sandbox in `error` with `recoverable` (400 "Sandbox is not in a recoverable state"); it goes back
# to stopped and is started; `start` of a sandbox in error is refused (`assertSandboxNotErrored`).
# The Rust side puts the sandboxes labelled `interop: fail-*` in error (nothing on the wire does).
expect_400("recover a healthy sandbox", lambda: sandbox.recover(), "not in a recoverable state")


def errored(labels):
    s = daytona.create(CreateSandboxFromSnapshotParams(labels=labels))
    deadline = time.time() + 20
    while time.time() < deadline:
        s.refresh_data()
        if s.state == "error":
            return s
        time.sleep(0.1)
    raise AssertionError(f"sandbox {s.id} never reached error: {s.state}")


bad = errored({"interop": "fail-recoverable"})
check("error state", bad.recoverable is True and bad.error_reason == "interop: disk full", repr((bad.recoverable, bad.error_reason)))
expect_400("exec on a sandbox in error", lambda: bad.process.exec("echo hi"), "started")
expect_400("start a sandbox in error", lambda: bad.start(), "errored state")
bad.recover()
check("recover", bad.state == "started" and bad.error_reason is None, repr((bad.state, bad.error_reason)))
check("a recovered sandbox runs commands", bad.process.exec("echo back").result == "back\n")
fatal = errored({"interop": "fail-fatal"})
expect_400("recover an unrecoverable error", lambda: fatal.recover(), "not in a recoverable state")
daytona.delete(bad)
daytona.delete(fatal)

# Sandbox state (issue 35), as SDK 0.226.1 calls it (`_sync/sandbox.py`, `_sync/snapshot.py`)
# against `daytonaio/daytona` v0.190.0 `apps/api/src/sandbox/services/sandbox.service.ts`.
# create_snapshot: `POST /sandbox/{id}/snapshot {name}`; the sandbox is `snapshotting` until the
# commit is persisted, then back in its previous state; the SDK waits for that and returns None.
# The runner commits the container without pausing it (`container_commit.go`: `Pause: false`).

SNAP = "interop-snap"
sandbox.process.exec("printf before > state-file; sleep 300 >/dev/null 2>&1 &")
check("create_snapshot", sandbox.create_snapshot(SNAP) is None and sandbox.state == "started", sandbox.state)
r = sandbox.process.exec("pgrep -x sleep >/dev/null && echo running")
check("the source runs on through a snapshot", r.result == "running\n", repr(r.result))
sandbox.process.exec("printf after > state-file")
snap = daytona.snapshot.get(SNAP)
check("snapshot.get by name", snap.name == SNAP and snap.state == "active", repr((snap.name, snap.state)))
listed = daytona.snapshot.list(source_sandbox_id=sandbox.id)
check("snapshot.list by source", [x.name for x in listed.items] == [SNAP] and listed.total == 1, repr(listed))
try:
    sandbox.create_snapshot(SNAP)
    check("a snapshot name is unique", False, "no error")
except DaytonaError as e:
    check("a snapshot name is unique", e.status_code == 409, repr(e))
from_snap = daytona.create(CreateSandboxFromSnapshotParams(snapshot=SNAP))
r = from_snap.process.exec("cat state-file; pgrep -x sleep >/dev/null && echo running || echo fresh")
check("create from a snapshot: its files, fresh processes", r.result == "beforefresh\n", repr(r.result))
check("the source keeps its own files", sandbox.process.exec("cat state-file").result == "after")
from_snap.process.exec("printf fork > state-file")
check("independent after", sandbox.process.exec("cat state-file").result == "after")

# pause and fork are `linux-vm`/`windows` only (`pause`, `forkSandbox`: 422); the emulated
# sandboxes are containers, Daytona's default class.
for name, fn, words in [
    ("pause a container sandbox", lambda: sandbox.pause(), "Pausing is not supported"),
    ("fork a container sandbox", lambda: sandbox.fork(), "Forking is not supported"),
]:
    try:
        fn()
        check(name, False, "no error")
    except DaytonaError as e:
        check(name, e.status_code == 422 and words in str(e), repr(e))

# Preview links (`getPortPreviewUrl`): `{proxyProtocol}://{port}-{id}.{proxyDomain}` with the
# sandbox's `authToken`; the emulator answers the self-hosted shape (`PROXY_DOMAIN=proxy.localhost`)
# on its own port. The proxy (`apps/proxy/pkg/proxy/auth.go` `Authenticate`) takes the token in
# `X-Daytona-Preview-Token` or the API key as a bearer token, else redirects (307) to sign-in.
PORT = 18000 + os.getpid() % 1000
sandbox.process.exec(
    f"mkdir -p www && printf served > www/index.html && cd www && "
    f"(python3 -m http.server {PORT} >/dev/null 2>&1 </dev/null &)"
)
link = sandbox.get_preview_link(PORT)
u = urllib.parse.urlsplit(link.url)
check("preview link", u.scheme == "http" and u.hostname == f"{PORT}-{sandbox.id}.proxy.localhost" and link.token, link.url)


def preview(headers, url=None):
    # *.localhost is loopback (RFC 6761); glibc does not resolve it, so connect by address.
    at = urllib.parse.urlsplit(url) if url else u
    for _ in range(100):
        c = http.client.HTTPConnection("127.0.0.1", at.port, timeout=10)
        c.request("GET", "/index.html", headers={"Host": at.netloc, **headers})
        resp = c.getresponse()
        body = resp.read()
        if resp.status != 502:
            return resp.status, body
        time.sleep(0.1)
    return resp.status, body


status, body = preview({"X-Daytona-Preview-Token": link.token})
check("preview with the token", status == 200 and body == b"served", repr((status, body)))
status, body = preview({"Authorization": "Bearer " + os.environ["DAYTONA_API_KEY"]})
check("preview with the API key", status == 200 and body == b"served", repr((status, body)))
status, _ = preview({})
check("preview without credentials redirects to sign-in", status == 307, status)
status, _ = preview({"X-Daytona-Preview-Token": "wrong"})
check("preview with a wrong token", status == 307, status)

# Signed preview URLs (`getSignedPortPreviewUrl`, v0.190.0 `sandbox.service.ts`): the token (16 of
# `[a-z0-9]`) is the host label, `{proxyProtocol}://{port}-{token}.{proxyDomain}`, kept
# `expiresInSeconds` (default 60, 1 s-24 h else 400); the proxy maps it to the sandbox with no
# header (`auth.go`: `getSandboxIdFromSignedPreviewUrlToken`), an expired or expired-by-call one
# fails every credential and redirects to sign-in (307).
signed = sandbox.create_signed_preview_url(PORT, expires_in_seconds=600)
su = urllib.parse.urlsplit(signed.url)
check(
    "signed preview url",
    signed.sandbox_id == sandbox.id and signed.port == PORT
    and re.fullmatch(r"[a-z0-9]{16}", signed.token) is not None
    and su.hostname == f"{PORT}-{signed.token}.proxy.localhost",
    repr(signed),
)
status, body = preview({}, signed.url)
check("the signed url needs no header", status == 200 and body == b"served", repr((status, body)))
status, _ = preview({}, signed.url.replace(f"{PORT}-", f"{PORT + 1}-", 1))
check("a signed token is for its port only", status == 307, status)
sandbox.expire_signed_preview_url(PORT, signed.token)
status, _ = preview({}, signed.url)
check("expire_signed_preview_url ends it at once", status == 307, status)
short = sandbox.create_signed_preview_url(PORT, expires_in_seconds=1)
status, _ = preview({}, short.url)
check("a one-second signed url works at first", status == 200, status)
time.sleep(1.1)
status, _ = preview({}, short.url)
check("and not after its expiry", status == 307, status)
for bad in (0, 86401):
    expect_400(
        f"expires_in_seconds={bad}",
        lambda: sandbox.create_signed_preview_url(PORT, expires_in_seconds=bad),
        "between 1 second and 24 hours",
    )
sandbox.process.exec(f"pkill -f 'http.server {PORT}'; true")

# delete: the SDK resolves a name to the id (`GET /snapshots/{name}`), then `DELETE
# /snapshots/{id}` (ParseUUIDPipe); creating from it after is create's 400.
daytona.snapshot.delete(SNAP)
try:
    daytona.snapshot.get(SNAP)
    check("snapshot.delete", False, "still there")
except DaytonaNotFoundError:
    check("snapshot.delete", True)
expect_400(
    "create from a deleted snapshot",
    lambda: daytona.create(CreateSandboxFromSnapshotParams(snapshot=SNAP)),
    "not found",
)
check("a sandbox made from a deleted snapshot runs on", from_snap.process.exec("cat state-file").result == "fork")
daytona.delete(from_snap)

daytona.delete(sandbox)
try:
    daytona.get(sandbox.id)
    check("delete", False, "still there")
except DaytonaNotFoundError:
    check("delete", True)
print("OK")
