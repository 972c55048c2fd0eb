"""The official Python SDK (vercel-sandbox 0.10.0) against the Vercel Sandbox emulator.

Every expectation states what the real service does, with its source:
- [PY] vercel-sandbox 0.10.0, vercel/sandbox/_internal/{api_client,service,process_stdin}.py
- [TS] @vercel/sandbox 3.5.0 src/api-client/{api-client,validators}.ts (from the source maps)
- [DOC] vercel.com/docs/vercel-sandbox/system-specifications (user `vercel-sandbox`,
  cwd /vercel/sandbox, sudo available)
- [TEST] vercel/sandbox packages/vercel-sandbox/src/command.test.ts (signal -> 128+n)

Prints one "ok <name>" per check and "OK" at the end.
"""

import os
import subprocess
import time

from vercel.sandbox.sync import (
    SandboxApiError,
    SandboxCredentials,
    SandboxPathNotFoundError,
    SandboxServiceOptions,
    SyncSandboxClient,
)

from checks import check, ok

URL = os.environ["VERCEL_API_URL"]
CREDS = SandboxCredentials(
    token=os.environ["VERCEL_TOKEN"],
    team_id=os.environ["VERCEL_TEAM_ID"],
    project_id=os.environ["VERCEL_PROJECT_ID"],
)


def client(creds=CREDS):
    return SyncSandboxClient.create(
        options=SandboxServiceOptions(base_url=URL, credentials_factory=lambda: creds)
    )


c = client()
with c.create_sandbox(name="interop-py", tags={"suite": "interop"}) as sb:
    check(sb.name == "interop-py", "create: named sandbox", sb.name)
    # [DOC] the default working directory is /vercel/sandbox; [DOC] commands run as vercel-sandbox.
    r = sb.run_process("pwd", capture_output=True)
    check(r.returncode == 0 and r.stdout == "/vercel/sandbox\n", "exec: default cwd", repr(r))

    r = sb.run_process("id", ["-un"], capture_output=True)
    check(r.stdout == "vercel-sandbox\n", "exec: runs as vercel-sandbox [DOC]", repr(r.stdout))
    r = sb.run_process("id", ["-u"], sudo=True, capture_output=True)
    check(r.stdout == "0\n", "exec: sudo=True runs as root [DOC: sudo access is available]", repr(r.stdout))

    # [TS]/[PY] `command` + `args` are exec'd without a shell: argv survives byte for byte.
    argv = ["a b", "$HOME", "'q'", "*", ""]
    r = sb.run_process("printf", ["[%s]\\n", *argv], capture_output=True)
    check(r.stdout == "".join(f"[{a}]\n" for a in argv), "exec: argv is not re-parsed", repr(r.stdout))

    # stdout and stderr are separate NDJSON streams ({"stream":"stdout"|"stderr"}), exit code from
    # the final {command} line [TS runCommand].
    r = sb.run_process("sh", ["-c", "echo out; echo err >&2; exit 3"], capture_output=True)
    check((r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n"), "exec: separate streams and exit 3", repr(r))

    r = sb.run_process("sh", ["-c", "exit 0"], capture_output=True)
    check(r.returncode == 0, "exec: exit 0", repr(r))

    sb.fs.mkdir("/vercel/sandbox/sub")
    r = sb.run_process("pwd", cwd="/vercel/sandbox/sub", capture_output=True)
    check(r.stdout == "/vercel/sandbox/sub\n", "exec: cwd", repr(r))
    r = sb.run_process("pwd", cwd="sub", capture_output=True)
    check(r.stdout == "/vercel/sandbox/sub\n", "exec: relative cwd joins the session cwd", repr(r))

    r = sb.run_process("sh", ["-c", 'printf %s "$GREETING"'], env={"GREETING": "hi there"}, capture_output=True)
    check(r.stdout == "hi there", "exec: env", repr(r))

    # [PY process_stdin] input= starts the command with attachStdin and writes through
    # POST .../cmd/{id}/stdin {data, offset} then {offset, close: true}.
    r = sb.run_process("cat", input=b"from stdin\n", capture_output=True)
    check(r.stdout == "from stdin\n", "exec: stdin through the stdin route", repr(r))
    big = os.urandom(700 * 1024).hex().encode()  # 1.4 MB: three 512 KiB chunks
    r = sb.run_process("sh", ["-c", "wc -c"], input=big, capture_output=True)
    check(r.stdout.strip() == str(len(big)), "exec: stdin in several chunks", repr(r.stdout))
    r = sb.run_process("sh", ["-c", "cat; echo done"], capture_output=True)
    check(r.stdout == "done\n", "exec: no input = empty stdin", repr(r))

    # [TEST] a command killed by a signal reports 128+n.
    r = sb.run_process("sh", ["-c", "kill -TERM $$"], capture_output=True)
    check(r.returncode == 143, "exec: signal death is 128+n", repr(r))
    # [PY run_process kill_after] -> the body's `timeout`: the service SIGKILLs (137).
    t0 = time.monotonic()
    r = sb.run_process("sleep", ["30"], kill_after=1, capture_output=True)
    check(r.returncode == 137 and time.monotonic() - t0 < 10, "exec: timeout kills with SIGKILL", repr(r))

    r = sb.run_process("sh", ["-c", "printf '\\303'; sleep 0.1; printf '\\251\\n'"], capture_output=True)
    check(r.stdout == "\u00e9\n", "exec: a UTF-8 sequence split across writes arrives whole", repr(r.stdout))

    # Detached: POST .../cmd without wait -> {command}; GET .../cmd/{id}?wait=true; GET .../logs.
    p = sb.create_process("sh", ["-c", "echo one; sleep 0.3; echo two >&2; exit 4"])
    check(p.returncode is None, "detached: started without waiting", repr(p.returncode))
    check(p.wait() == 4, "detached: wait returns the exit code")
    out = p.stdout.read()
    err = p.stderr.read()
    check((out, err) == ("one\n", "two\n"), "detached: logs", repr((out, err)))
    again = sb.get_process(p.id)
    check(again.returncode == 4, "detached: get by id", repr(again.returncode))

    p = sb.create_process("cat", stdin=subprocess.PIPE)
    o, e = p.communicate(b"piped\n")
    check(o == "piped\n" and p.returncode == 0, "detached: stdin=PIPE + communicate", repr((o, e)))

    p = sb.create_process("sleep", ["30"])
    p.kill()
    check(p.wait() == 137, "detached: kill sends SIGKILL -> 137")
    p = sb.create_process("sleep", ["30"])
    p.terminate()
    check(p.wait() == 143, "detached: terminate sends SIGTERM -> 143")
    check(any(x.id == p.id for x in sb.query_processes()), "detached: listed")

    # Files: [PY] write = a gzip'd tar to fs/write (x-cwd: /); read = fs/read (octet-stream).
    sb.fs.write_bytes("/vercel/sandbox/hello.txt", b"hello\x00\xff bytes\n")
    check(sb.fs.read_bytes("/vercel/sandbox/hello.txt") == b"hello\x00\xff bytes\n", "files: write then read bytes")
    r = sb.run_process("cat", ["/vercel/sandbox/hello.txt"], capture_output=True)
    check(r.stdout.startswith("hello"), "files: the command sees the written file", repr(r.stdout))
    sb.fs.write_text("rel.txt", "relative\n")
    check(sb.fs.read_text("/vercel/sandbox/rel.txt") == "relative\n", "files: relative paths join the session cwd")
    sb.fs.write_bytes("/vercel/sandbox/run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
    r = sb.run_process("/vercel/sandbox/run.sh", capture_output=True)
    check(r.stdout == "ran\n", "files: the mode is kept", repr(r))
    r = sb.run_process("stat", ["-c", "%U", "/vercel/sandbox/hello.txt"], capture_output=True)
    owner = r.stdout.strip()
    check(owner == "vercel-sandbox", "files: extracted by the sandbox user [DOC: user code runs as vercel-sandbox]", owner)
    try:
        sb.fs.read_bytes("/vercel/sandbox/missing.txt")
        check(False, "files: missing file", "no error")
    except SandboxPathNotFoundError:
        ok("files: a missing file is SandboxPathNotFoundError")
    sb.fs.mkdir("/vercel/sandbox/a/b/c")  # recursive=True is the SDK default
    check(sb.fs.is_dir("/vercel/sandbox/a/b/c"), "files: mkdir (recursive)")
    try:
        sb.fs.mkdir("/vercel/sandbox/x/y", recursive=False)
        check(False, "files: mkdir without parent", "no error")
    except SandboxPathNotFoundError:
        ok("files: mkdir without its parent is SandboxPathNotFoundError")
    names = sorted(e.path for e in sb.fs.listdir("/vercel/sandbox"))
    check({"hello.txt", "rel.txt", "run.sh", "a", "sub"} <= set(names), "files: listdir (a command)", repr(names))

    # Lifecycle: get, list with a tag filter, stop, resume keeps the filesystem.
    got = c.get_sandbox(name="interop-py")
    check(got.current_session_id == sb.current_session_id, "lifecycle: get by name")
    listed = [s.name for s in c.query_sandboxes()]
    check("interop-py" in listed, "lifecycle: listed", repr(listed))
    old = sb.current_session_id
    sb.stop()
    check(sb.status == "stopped", "lifecycle: stop", repr(sb.status))
    # [TS withResume] a stopped sandbox resumes on the next operation, in a new session.
    r = sb.run_process("cat", ["/vercel/sandbox/rel.txt"], capture_output=True)
    check(r.stdout == "relative\n" and sb.current_session_id != old, "lifecycle: resumed in a new session with its files", repr((r.stdout, sb.current_session_id, old)))

    # [DOC vercel.com/docs/sandbox/concepts/persistent-sandboxes] persistence is the default (the
    # SDK sends no `persistent`); a non-persistent sandbox discards its filesystem when its
    # session ends, so a resume starts from a fresh one.
    check(sb.persistent is True, "lifecycle: persistent by default", repr(sb.persistent))

with c.create_sandbox(name="interop-py-ephemeral", persistent=False) as eph:
    check(eph.persistent is False, "lifecycle: persistent=False is kept", repr(eph.persistent))
    eph.run_process("sh", ["-c", "echo gone > /vercel/sandbox/eph.txt"])
    eph.stop()
    r = eph.run_process("sh", ["-c", "cat /vercel/sandbox/eph.txt 2>/dev/null || echo fresh"], capture_output=True)
    check(r.stdout == "fresh\n", "lifecycle: a non-persistent sandbox resumes with a fresh filesystem", repr(r.stdout))

# [DOC vercel.com/docs/vercel-sandbox: "ports" exposes ports; PY `routes`, TS `domain(port)`]
# a port declared at create has a route whose URL reaches the sandbox's server from outside; the
# SDK hands `url` on as the API answered it (runtime_common.py `routes`). The service's URL is
# https://{subdomain}.vercel.run; the emulator answers http://{subdomain}.vercel.localhost:<port>.
import socket
import urllib.request

with socket.socket() as s_:
    s_.bind(("127.0.0.1", 0))
    port = s_.getsockname()[1]
with c.create_sandbox(name="interop-py-routes", ports=[port]) as sb:
    routes = {r.port: r for r in sb.routes}
    check(set(routes) == {port}, "routes: one route per declared port", repr(sb.routes))
    sb.run_process("sh", ["-c", "mkdir -p www && echo routed > www/index.html"])
    serve = f"cd www && if command -v python3 >/dev/null; then exec python3 -m http.server {port}; else exec busybox httpd -f -p {port}; fi"
    server = sb.create_process("sh", ["-c", serve])
    url = routes[port].url
    host = url.split("//", 1)[1].split(":", 1)[0]
    emulator = URL.split("//", 1)[1].split("/", 1)[0]
    body, last = None, None
    for _ in range(100):
        try:
            # *.localhost is loopback (RFC 6761); Python's resolver may not say so: connect to
            # the emulator with the route's Host.
            req = urllib.request.Request(f"http://{emulator}/index.html", headers={"Host": url.split("//", 1)[1]})
            body = urllib.request.urlopen(req, timeout=5).read()
            break
        except Exception as e:  # the server is not listening yet
            last = e
            time.sleep(0.1)
    check(host.endswith(".vercel.localhost") and body == b"routed\n", "routes: the route URL reaches the sandbox's port", repr((url, body, last)))
    server.kill()

# Snapshots. [DOC vercel.com/docs/sandbox/concepts/snapshots] "Once you create a snapshot, the
# sandbox shuts down automatically" and "Snapshots expire after 30 days by default"; [PY]
# api_client.py `create_snapshot` (POST …/sessions/{id}/snapshot {expiration} -> {snapshot,
# session}), `query_snapshots`, `get_snapshot`, `delete_snapshot`, `SnapshotSource`.
from vercel.sandbox.sync import SnapshotSource

with c.create_sandbox(name="interop-py-snap") as sb:
    sb.run_process("sh", ["-c", "echo before > kept.txt"])
    snap = sb.snapshot()
    check(snap.status == "created" and snap.id and snap.size_bytes > 0, "snapshot: created, with a size", repr((snap.status, snap.id, snap.size_bytes)))
    day30 = 30 * 24 * 3600 * 1000
    check(snap.expires_at is not None and abs(snap.expires_at - snap.created_at - day30) < 60_000, "snapshot: expires after 30 days by default [DOC]", repr((snap.created_at, snap.expires_at)))
    # The handle's own `status` is the sandbox payload it last fetched; a fresh get says it.
    got = c.get_sandbox(name="interop-py-snap")
    check(got.status == "stopped", "snapshot: the sandbox is stopped after it [DOC]", repr(got.status))
    check(got.current_snapshot_id == snap.id, "snapshot: the sandbox's currentSnapshotId", repr(got.current_snapshot_id))
    # The sandbox resumes on its next use with its files; the change is not in the snapshot.
    sb.run_process("sh", ["-c", "echo after > kept.txt"])
    forever = sb.snapshot(expiration=0)
    check(forever.expires_at is None, "snapshot: expiration=0 never expires [PY SnapshotExpiration]", repr(forever.expires_at))
    listed = [s.id for s in sb.list_snapshots()]
    check(set(listed) == {snap.id, forever.id}, "snapshot: listed for the sandbox", repr(listed))
    check(c.get_snapshot(snapshot_id=snap.id).id == snap.id, "snapshot: get by id")
    with c.create_sandbox(name="interop-py-from-snap", source=SnapshotSource(snapshot_id=snap.id)) as copy:
        r = copy.run_process("cat", ["kept.txt"], capture_output=True)
        check(r.stdout == "before\n", "snapshot: a sandbox created from it has the old files", repr(r.stdout))
        copy.run_process("sh", ["-c", "echo copy > kept.txt"])
        r = sb.run_process("cat", ["kept.txt"], capture_output=True)
        check(r.stdout == "after\n", "snapshot: source and copy share nothing", repr(r.stdout))
    check(snap.delete().status == "deleted", "snapshot: delete answers status deleted", "")
    forever.delete()
    try:
        c.create_sandbox(name="interop-py-from-deleted", source=SnapshotSource(snapshot_id=snap.id))
        check(False, "snapshot: create from a deleted snapshot", "created")
    except SandboxApiError as e:
        check(e.status_code == 404, "snapshot: create from a deleted snapshot is 404", repr(e.status_code))

# The context manager deleted it.
try:
    c.get_sandbox(name="interop-py")
    check(False, "lifecycle: deleted", "still there")
except SandboxApiError as e:
    check(e.status_code == 404, "lifecycle: deleted on context exit (404 after)", repr(e.status_code))

# Errors: a bad token is 403 forbidden.
bad = client(SandboxCredentials(token="wrong", team_id=CREDS.team_id, project_id=CREDS.project_id))
try:
    bad.create_sandbox(name="never")
    check(False, "errors: bad token", "accepted")
except SandboxApiError as e:
    check(e.status_code == 403 and e.code == "forbidden", "errors: a bad token is 403 forbidden", repr((e.status_code, e.code)))

# Injected faults (armed by the Rust test through the emulator's fault handle, route `exec`):
# 1) `exec=500`: the command ran, then 500. [PY run_process]: a failed start is raised, never re-run.
# 2) `exec=cut`: the NDJSON stream ends before the final {command}. [PY service.py run_process]:
#    a truncated stream after the start is not an answer; the SDK follows the rest of the output
#    from GET .../logs (skipping what it already delivered) and the exit from ?wait=true.
with c.create_sandbox(name="interop-py-faults") as sb:
    open(os.environ["FAULTS_READY"], "w").close()
    while not os.path.exists(os.environ["FAULTS_ARMED"]):
        time.sleep(0.05)
    try:
        r = sb.run_process("sh", ["-c", "echo ran >> /vercel/sandbox/count"], capture_output=True)
        check(False, "faults: 500", repr(r))
    except SandboxApiError as e:
        check(e.status_code == 500, "faults: a 500 on run is SandboxApiError(500)", repr(e.status_code))
    r = sb.run_process("sh", ["-c", "echo partial; echo more >&2; exit 5"], capture_output=True)
    check((r.returncode, r.stdout, r.stderr) == (5, "partial\n", "more\n"), "faults: a cut stream is recovered from the logs and wait routes", repr(r))
    r = sb.run_process("cat", ["/vercel/sandbox/count"], capture_output=True)
    check(r.stdout == "ran\n", "faults: the 500'd command ran once, not retried", repr(r.stdout))

c.close()
print("OK")
