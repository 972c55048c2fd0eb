"""The official Python SDK (northflank 2.1.0) against the Northflank emulator.

Every expectation states what the real service or SDK does, with its source:
- [PY] northflank 2.1.0 northflank/_protocols/__init__.py (exec, sessions, log tail, file copy),
  northflank/endpoint.py (REST envelope {"data"}, errors)
- [DOC] northflank.com/docs/v1/api/execute-command (mirrored in northflank/skills):
  shell "none" runs the command without a shell; `bash -c` runs it in that shell.

Prints one "ok <name>" per check and "OK" at the end.
"""

import os
import pathlib
import tempfile
import time

from northflank import ApiClient
from northflank.errors import ApiCallError

from checks import check, ok

URL = os.environ["NORTHFLANK_API_BASE_URL"]
TOKEN = os.environ["NORTHFLANK_API_TOKEN"]
P = os.environ["NORTHFLANK_PROJECT_ID"]
S = os.environ["NORTHFLANK_SERVICE_ID"]
J = os.environ["NORTHFLANK_JOB_ID"]


c = ApiClient(api_token=TOKEN, base_url=URL)
run = lambda argv, **kw: c.exec.run_service_command(project_id=P, service_id=S, command=argv, **kw)

# REST around exec: the service exists and is deployed.
svc = c.get.service(project_id=P, service_id=S)
check(svc.data["id"] == S, "rest: get service", repr(svc.data))
names = [s["id"] for s in c.list.services(project_id=P).data["services"]]
check(S in names, "rest: list services", repr(names))
try:
    c.get.service(project_id=P, service_id="nope")
    check(False, "rest: unknown service", "no error")
except ApiCallError as e:
    check(e.status == 404, "rest: an unknown service is ApiCallError(404)", repr(e.status))

# [PY run_service_command] one-shot: init (shell "none") then stdInEnd at once.
r = run(["sh", "-c", "echo out; echo err >&2; exit 3"])
check((r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n"), "exec: separate streams, exit 3", repr(r))
check(r.status == "Failure" and not r.ok, "exec: status Failure for a non-zero exit", repr(r.status))
raw = [f for f in r.raw_frames if f.get("type") == "completion"][0]["data"]["exitCode"]
check(raw == "3", "exec: exitCode arrives as a string, coerced by the SDK [PY _coerce_exit_code]", repr(raw))
r = run(["true"])
check(r.exit_code == 0 and r.status == "Success" and r.ok, "exec: exit 0 is Success", repr(r))
raw = [f for f in r.raw_frames if f.get("type") == "completion"][0]["data"]["exitCode"]
# The JS client's own file copy tests `exitCode === 0` after `test -e`: a success is the number 0.
check(raw == 0 and isinstance(raw, int), "exec: a success's exitCode is the number 0", repr(raw))

argv = ["a b", "$HOME", "'q'", "*", ""]
r = run(["printf", "[%s]\\n", *argv])
check(r.stdout == "".join(f"[{a}]\n" for a in argv), "exec: argv is not re-parsed with shell none [DOC]", repr(r.stdout))
r = run("echo $HOME && pwd", shell="bash -c")
check(r.stdout == "/root\n/app\n", "exec: a string in `bash -c` [DOC]", repr(r.stdout))
r = run(["pwd"])
check(r.stdout == "/app\n", "exec: the container's working directory", repr(r.stdout))
r = run(["id", "-u"])
check(r.stdout == "0\n", "exec: the image's user (root)", repr(r.stdout))
r = run(["id", "-un"], user="northflank")
check(r.stdout == "northflank\n", "exec: `user` picks the image's account by name [DOC --user]", repr(r.stdout))
r = run(["sh", "-c", "cd /tmp && pwd"])
check(r.stdout == "/tmp\n", "exec: cwd through the command", repr(r.stdout))
r = run(["env", "GREETING=hi", "sh", "-c", 'printf %s "$GREETING"'])
check(r.stdout == "hi", "exec: env through the command", repr(r.stdout))
r = run(["sh", "-c", "kill -TERM $$"])
check(r.exit_code == 143, "exec: a signal death is 128+n", repr(r.exit_code))
r = run(["sh", "-c", "cat; echo done"])
check(r.stdout == "done\n", "exec: the one-shot's stdin is closed at once", repr(r.stdout))
r = c.exec.run_service_command(project_id=P, service_id=S, command=["true"], team_id="execseam-team")
check(r.ok, "exec: the team-scoped route /v1/command-exec/teams/{t}/projects/...", repr(r))

# Sessions: payload frames are stdin, stdInEnd closes it.
with c.exec.open_service_session(project_id=P, service_id=S, command=["cat"], tty=False) as sess:
    check(sess.info.instance_name is not None, "session: init reply names the instance", repr(sess.info))
    sess.send("hello ")
    sess.send("session\n")
    got = ""
    for chunk in sess:
        got += chunk.data
        if got.endswith("session\n"):
            break
    sess.send_eof()
    res = sess.wait()
check(got == "hello session\n" and res.exit_code == 0, "session: stdin frames, output, then EOF", repr((got, res)))
with c.exec.open_service_session(project_id=P, service_id=S, command=["sh", "-c", "printf '\\000\\377'; printf x >&2"], tty=False, encoding="base64") as sess:
    parts = {"stdout": b"", "stderr": b""}
    import base64
    for chunk in sess:
        parts[chunk.stream] += base64.b64decode(chunk.data)
    res = sess.result
check(parts == {"stdout": b"\x00\xff", "stderr": b"x"} and res.exit_code == 0, "session: encoding base64 is byte-exact", repr(parts))

# Files: [PY NorthflankFiles] a tar piped through exec sessions (encoding base64).
with tempfile.TemporaryDirectory() as d:
    src = pathlib.Path(d, "up.txt")
    src.write_bytes(b"uploaded\x00bytes\n")
    res = c.files.upload(project_id=P, service_id=S, local_path=str(src), remote_path="/app/up.txt")
    check(res.direction == "upload", "files: upload", repr(res))
    r = run(["cat", "/app/up.txt"])
    check(r.stdout == "uploaded\x00bytes\n", "files: the command sees the uploaded file", repr(r.stdout))
    dst = pathlib.Path(d, "down.txt")
    c.files.download(project_id=P, service_id=S, remote_path="/app/up.txt", local_path=str(dst))
    check(dst.read_bytes() == b"uploaded\x00bytes\n", "files: download")

# Detached + wait + logs: a job run (REST), polled until concluded, its logs tailed (WebSocket).
started = c.start.job.run(project_id=P, job_id=J, data={
    "deployment": {"docker": {"configType": "customCommand", "customCommand": "echo one; sleep 0.2; echo two >&2; exit 4"}},
    "runtimeEnvironment": {"RUN_VAR": "x"},
})
run_id = started.data["id"]
check(run_id and started.data["runName"], "job: start a run", repr(started.data))
deadline = time.time() + 20
while True:
    info = c.get.job.run(project_id=P, job_id=J, run_id=run_id).data
    if info["concluded"] or time.time() > deadline:
        break
    time.sleep(0.1)
check(info["concluded"] and info["status"] == "FAILED", "job: the run concludes FAILED for exit 4", repr(info))
with c.logs.tail_job_logs(project_id=P, job_id=J, run_id=run_id) as tail:
    lines = [l.log for l in tail]
check(lines == ["one", "two"], "job: the run's log lines over the tail WebSocket", repr(lines))
ok_run = c.start.job.run(project_id=P, job_id=J, data={
    "deployment": {"docker": {"configType": "customCommand", "customCommand": 'echo "$RUN_VAR"'}},
    "runtimeEnvironment": {"RUN_VAR": "from-env"},
}).data["id"]
while not c.get.job.run(project_id=P, job_id=J, run_id=ok_run).data["concluded"]:
    time.sleep(0.1)
info = c.get.job.run(project_id=P, job_id=J, run_id=ok_run).data
check(info["status"] == "SUCCESS", "job: a run with exit 0 is SUCCESS", repr(info))
with c.logs.tail_job_logs(project_id=P, job_id=J, run_id=ok_run) as tail:
    check([l.log for l in tail] == ["from-env"], "job: runtimeEnvironment reaches the run")

# Errors: a bad token is refused in the init reply (auth != "successful") [PY _drain_exec_stream].
bad = ApiClient(api_token="wrong", base_url=URL)
try:
    bad.exec.run_service_command(project_id=P, service_id=S, command=["true"])
    check(False, "errors: bad token", "accepted")
except ApiCallError as e:
    check(e.status == 401 and "auth failed" in str(e), "errors: a bad token fails the init handshake", repr(e))

# Injected faults, armed by the Rust test (route `exec`): 1) a stream closed before the completion
# frame: [PY] "closed without a completion frame" is an error, never a result; 2) 429 on the
# upgrade: [PY] InvalidStatus -> ApiCallError(429), and only handshake *timeouts* are retried.
open(os.environ["FAULTS_READY"], "w").close()
while not os.path.exists(os.environ["FAULTS_ARMED"]):
    time.sleep(0.05)
try:
    r = run(["echo", "cut"])
    check(False, "faults: cut", repr(r))
except ApiCallError as e:
    check("without a completion frame" in str(e), "faults: a cut stream is an error, not a result", repr(e))
try:
    r = run(["true"])
    check(False, "faults: 429", repr(r))
except ApiCallError as e:
    check(e.status == 429, "faults: a 429 upgrade is ApiCallError(429)", repr(e.status))
print("OK")
