// The official JS client (@northflank/js-client 0.9.5) against the Northflank emulator.
//
// Every expectation states what the real service or client does, with its source:
// - [JS] @northflank/js-client 0.9.5 dist/esm/api-client.js: ExecCommandStandard (init frame with
//   the token, stdOut/stdErr/completion, close codes 1000/1005), execCommand (shell "none" by
//   default, never sends stdInEnd), the log range fetch, NorthflankFileCopy
// - [PY] northflank 2.1.0 _protocols/__init__.py `_coerce_exit_code`: the proxy sends exitCode as
//   a JSON string ("42") in practice; the JS client passes it through unchanged. [JS] its own file
//   copy tests `exitCode === 0` after `test -e`: a success must be the number 0.
// - [DOC] northflank.com/docs/v1/api/execute-command (mirrored in northflank/skills)
//
// Prints one "ok <name>" per check and "OK" at the end.
import { ApiClient, ApiClientInMemoryContextProvider } from "@northflank/js-client";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = process.env;
const P = env.NORTHFLANK_PROJECT_ID, S = env.NORTHFLANK_SERVICE_ID, J = env.NORTHFLANK_JOB_ID;
const ok = (name) => console.log(`ok ${name}`);
function check(cond, name, detail = "") {
  if (!cond) {
    console.log(`FAILED ${name}: ${detail}`);
    process.exit(1);
  }
  ok(name);
}
const j = (v) => JSON.stringify(v);

async function client(token) {
  const ctx = new ApiClientInMemoryContextProvider();
  await ctx.addContext({ name: "emulator", token, host: env.NORTHFLANK_API_BASE_URL });
  return new ApiClient(ctx, { throwErrorOnHttpErrorCode: true });
}
const api = await client(env.NORTHFLANK_API_TOKEN);
const target = { projectId: P, serviceId: S };

// REST around exec.
const svc = await api.get.service({ parameters: target });
check(svc.data.id === S, "rest: get service", j(svc.data));
const containers = await api.get.service.containers({ parameters: target });
check(containers.data.containers.length === 1, "rest: the service's containers", j(containers.data));
try {
  await api.get.service({ parameters: { projectId: P, serviceId: "nope" } });
  check(false, "rest: unknown service", "no error");
} catch (e) {
  check(e.status === 404, "rest: an unknown service is NorthflankApiCallError(404)", `${e.name} ${e.status}`);
}

// [JS execCommand] one-shot, shell "none" unless given.
let r = await api.exec.execServiceCommand(target, { command: ["sh", "-c", "echo out; echo err >&2; exit 3"] });
check(r.stdOut === "out\n" && r.stdErr === "err\n", "exec: separate streams", j(r));
check(r.commandResult.exitCode === "3" && r.commandResult.status === "Failure", "exec: a failure's exitCode is passed through as the proxy's string [PY][JS]", j(r.commandResult));
r = await api.exec.execServiceCommand(target, { command: ["true"] });
check(r.commandResult.exitCode === 0 && r.commandResult.status === "Success", "exec: a success is exitCode 0 (a number) [JS file copy]", j(r.commandResult));
const argv = ["a b", "$HOME", "'q'", "*", ""];
r = await api.exec.execServiceCommand(target, { command: ["printf", "[%s]\\n", ...argv] });
check(r.stdOut === argv.map((a) => `[${a}]\n`).join(""), "exec: argv is not re-parsed [DOC]", j(r.stdOut));
r = await api.exec.execServiceCommand(target, { command: "echo $HOME && pwd", shell: "bash -c" });
check(r.stdOut === "/root\n/app\n", "exec: a string in `bash -c` [DOC]", j(r.stdOut));
// [DOC] "both the following commands will execute the command `id` as the root user": user 0.
r = await api.exec.execServiceCommand(target, { command: "id", user: 0 });
check(r.stdOut.startsWith("uid=0(root) gid=0(root)"), "exec: user 0 (a number) is root [DOC]", j(r.stdOut));
r = await api.exec.execServiceCommand(target, { command: ["sh", "-c", "kill -TERM $$"] });
check(r.commandResult.exitCode === "143", "exec: a signal death is 128+n", j(r.commandResult));
r = await api.exec.execServiceCommand({ ...target, teamId: "execseam-team" }, { command: ["true"] });
check(r.commandResult.status === "Success", "exec: the team-scoped route", j(r.commandResult));

// Sessions: stdIn is a stream of payload frames; ending it sends stdInEnd [JS ExecCommandStandard].
let sess = await api.exec.execServiceSession(target, { command: ["sh", "-c", "cat; echo; echo eof >&2"], shell: "none", tty: false });
let out = "", err = "";
sess.stdOut.on("data", (d) => (out += d));
sess.stdErr.on("data", (d) => (err += d));
sess.stdIn.write("from ");
sess.stdIn.write("stdin");
await new Promise((res) => setTimeout(res, 200));
sess.stdIn.end();
let result = await sess.waitForCommandResult();
check(out === "from stdin\n" && err === "eof\n" && result.exitCode === 0, "session: stdin frames, then stdInEnd", j([out, err, result]));

// [JS] tty: true. The emulator runs a real pseudo-terminal: stderr arrives merged into stdOut,
// lines end in CRLF (the terminal's output processing).
sess = await api.exec.execServiceSession(target, { command: ["sh", "-c", "echo line; echo err >&2"], shell: "none", tty: true });
out = ""; err = "";
sess.stdOut.on("data", (d) => (out += d));
sess.stdErr.on("data", (d) => (err += d));
result = await sess.waitForCommandResult();
check(out === "line\r\nerr\r\n" && err === "" && result.exitCode === 0, "session: a TTY merges the streams with CRLF", j([out, err]));

// Files: [JS NorthflankFileCopy] tar through exec sessions.
const tmp = mkdtempSync(join(tmpdir(), "nf-interop-"));
writeFileSync(join(tmp, "up.txt"), "uploaded by js\n");
await api.fileCopy.uploadServiceFiles(target, { localPath: join(tmp, "up.txt"), remotePath: "/app/js/up.txt" });
r = await api.exec.execServiceCommand(target, { command: ["cat", "/app/js/up.txt"] });
check(r.stdOut === "uploaded by js\n", "files: upload, seen by a command", j(r));
await api.fileCopy.downloadServiceFiles(target, { localPath: join(tmp, "down.txt"), remotePath: "/app/js/up.txt" });
// [JS downloadFiles] resolves on the command's result while its local `tar` extraction (piped
// from stdOut) may still be writing: wait for it.
const down = () => (existsSync(join(tmp, "down.txt")) ? readFileSync(join(tmp, "down.txt"), "utf8") : "");
for (let i = 0; i < 100 && down() !== "uploaded by js\n"; i++) await new Promise((res) => setTimeout(res, 20));
check(readFileSync(join(tmp, "down.txt"), "utf8") === "uploaded by js\n", "files: download");

// Detached + wait + logs: a job run (REST), polled, its logs fetched (REST range, runId).
const started = await api.start.job.run({
  parameters: { projectId: P, jobId: J },
  data: { deployment: { docker: { configType: "customCommand", customCommand: "echo one; sleep 0.2; echo two >&2; exit 4" } } },
});
const runId = started.data.id;
check(typeof runId === "string" && started.data.runName, "job: start a run", j(started.data));
let info;
for (let i = 0; i < 200; i++) {
  info = (await api.get.job.run({ parameters: { projectId: P, jobId: J, runId } })).data;
  if (info.concluded) break;
  await new Promise((res) => setTimeout(res, 100));
}
check(info.concluded && info.status === "FAILED", "job: the run concludes FAILED for exit 4", j(info));
const logs = await api.logs.getJobLogs({ parameters: { projectId: P, jobId: J }, options: { runId } });
check(j(logs.data.map((l) => l.log)) === j(["one", "two"]), "job: the run's log lines (range)", j(logs.data));

// Errors: a bad token fails the init handshake [JS "Command initialization failed"].
const bad = await client("wrong");
try {
  await bad.exec.execServiceCommand(target, { command: ["true"] });
  check(false, "errors: bad token", "accepted");
} catch (e) {
  check(/initialization failed/.test(e.message), "errors: a bad token fails the init handshake", e.message);
}

// Faults, armed by the Rust test (route `exec`): 1) an `error` frame instead of the completion
// (the command ran): [JS] rejects with the frame's message; 2) a normal close before the
// completion: [JS] "Connection closed before receiving command result".
writeFileSync(env.FAULTS_READY, "");
while (!existsSync(env.FAULTS_ARMED)) await new Promise((res) => setTimeout(res, 50));
try {
  r = await api.exec.execServiceCommand(target, { command: ["sh", "-c", "echo ran >> /tmp/ran"] });
  check(false, "faults: error frame", j(r));
} catch (e) {
  check(/Internal server error/.test(e.message), "faults: an error frame rejects the exec", e.message);
}
try {
  r = await api.exec.execServiceCommand(target, { command: ["echo", "cut"] });
  check(false, "faults: cut", j(r));
} catch (e) {
  check(/closed before receiving command result/.test(e.message), "faults: a close before the completion rejects", e.message);
}
r = await api.exec.execServiceCommand(target, { command: ["cat", "/tmp/ran"] });
check(r.stdOut === "ran\n", "faults: the failed exec ran once (exec is not retried)", j(r.stdOut));
console.log("OK");
