// The official TypeScript SDK (@vercel/sandbox 3.5.0) against the Vercel Sandbox emulator.
//
// Every expectation states what the real service or SDK does, with its source:
// - [TS] @vercel/sandbox 3.5.0 src/api-client/{api-client,with-retry,validators}.ts,
//   src/{sandbox,session,command}.ts (recovered from the package's source maps)
// - [DOC] vercel.com/docs/vercel-sandbox/system-specifications (cwd /vercel/sandbox, user
//   vercel-sandbox, sudo available)
// - [TEST] vercel/sandbox packages/vercel-sandbox/src/command.test.ts (signal -> 128+n)
//
// The SDK has no base-URL option: its public `fetch` option rewrites https://vercel.com/api.
// It has no stdin either: stdin goes through a file written with writeFiles.
// Prints one "ok <name>" per check and "OK" at the end.
import { Sandbox, APIError } from "@vercel/sandbox";
import { existsSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";

const URL = process.env.VERCEL_API_URL;
const creds = {
  token: process.env.VERCEL_TOKEN,
  teamId: process.env.VERCEL_TEAM_ID,
  projectId: process.env.VERCEL_PROJECT_ID,
  fetch: (u, init) => fetch(String(u).replace("https://vercel.com/api", URL), init),
};

function ok(name) {
  console.log(`ok ${name}`);
}
function check(cond, name, detail = "") {
  if (!cond) {
    console.log(`FAILED ${name}: ${detail}`);
    process.exit(1);
  }
  ok(name);
}
const j = (v) => JSON.stringify(v);

const sb = await Sandbox.create({ ...creds, name: "interop-ts", timeout: 600000 });
check(sb.name === "interop-ts" && sb.status === "running", "create: named, running", sb.status);

let r = await sb.runCommand("pwd");
check(r.exitCode === 0 && (await r.stdout()) === "/vercel/sandbox\n", "exec: default cwd [DOC]");

r = await sb.runCommand("id", ["-un"]);
check((await r.stdout()) === "vercel-sandbox\n", "exec: runs as vercel-sandbox [DOC]", j(await r.stdout()));
r = await sb.runCommand({ cmd: "id", args: ["-u"], sudo: true });
check((await r.stdout()) === "0\n", "exec: sudo runs as root [DOC]", j(await r.stdout()));

// [TS] cmd + args, no shell: argv survives byte for byte.
const argv = ["a b", "$HOME", "'q'", "*", ""];
r = await sb.runCommand("printf", ["[%s]\\n", ...argv]);
check((await r.stdout()) === argv.map((a) => `[${a}]\n`).join(""), "exec: argv is not re-parsed", j(await r.stdout()));

r = await sb.runCommand({ cmd: "sh", args: ["-c", "echo out; echo err >&2; exit 3"] });
check(r.exitCode === 3 && (await r.stdout()) === "out\n" && (await r.stderr()) === "err\n", "exec: separate streams and exit 3", j([r.exitCode, await r.stdout(), await r.stderr()]));

await sb.mkDir("/vercel/sandbox/sub");
r = await sb.runCommand({ cmd: "pwd", cwd: "/vercel/sandbox/sub" });
check((await r.stdout()) === "/vercel/sandbox/sub\n", "exec: cwd");

r = await sb.runCommand({ cmd: "sh", args: ["-c", 'printf %s "$GREETING"'], env: { GREETING: "hi there" } });
check((await r.stdout()) === "hi there", "exec: env");

// No stdin API in the TS SDK: write the input as a file, redirect from it.
await sb.writeFiles([{ path: "/tmp/in.txt", content: Buffer.from("from a file\n") }]);
r = await sb.runCommand({ cmd: "sh", args: ["-c", "exec cat < /tmp/in.txt"] });
check((await r.stdout()) === "from a file\n", "exec: stdin through a file");

r = await sb.runCommand({ cmd: "sh", args: ["-c", "kill -TERM $$"] });
check(r.exitCode === 143, "exec: signal death is 128+n [TEST]", r.exitCode);
// [TS] `timeoutMs` -> body `timeout`: killed in the sandbox with SIGKILL -> 137.
r = await sb.runCommand({ cmd: "sleep", args: ["30"], timeoutMs: 1000 });
check(r.exitCode === 137, "exec: timeoutMs kills with SIGKILL", r.exitCode);

// Detached: {command} with exitCode null, then wait (?wait=true) and logs (NDJSON).
let cmd = await sb.runCommand({ cmd: "sh", args: ["-c", "echo one; sleep 0.3; echo two >&2; exit 4"], detached: true });
check(cmd.exitCode === null, "detached: started without waiting", cmd.exitCode);
const lines = [];
for await (const l of cmd.logs()) lines.push([l.stream, l.data]);
check(j(lines) === j([["stdout", "one\n"], ["stderr", "two\n"]]), "detached: logs stream in order", j(lines));
const done = await cmd.wait();
check(done.exitCode === 4, "detached: wait returns the exit code", done.exitCode);
const again = await sb.getCommand(cmd.cmdId);
check(again.exitCode === 4, "detached: get by id", again.exitCode);
cmd = await sb.runCommand({ cmd: "sleep", args: ["30"], detached: true });
await cmd.kill("SIGKILL");
check((await cmd.wait()).exitCode === 137, "detached: kill(SIGKILL) -> 137");
cmd = await sb.runCommand({ cmd: "sleep", args: ["30"], detached: true });
await cmd.kill();
check((await cmd.wait()).exitCode === 143, "detached: kill() sends SIGTERM -> 143");

// Files: writeFiles = a gzip'd tar (x-cwd /, entry names relative to /); readFile = fs/read.
await sb.writeFiles([
  { path: "/vercel/sandbox/hello.txt", content: Buffer.from([104, 105, 0, 255, 10]) },
  { path: "rel/nested.txt", content: "relative\n" },
  { path: "/vercel/sandbox/run.sh", content: "#!/bin/sh\necho ran\n", mode: 0o755 },
]);
const buf = await sb.readFileToBuffer({ path: "/vercel/sandbox/hello.txt" });
check(buf !== null && j([...buf]) === j([104, 105, 0, 255, 10]), "files: write then read bytes", j(buf && [...buf]));
const rel = await sb.readFileToBuffer({ path: "/vercel/sandbox/rel/nested.txt" });
check(rel !== null && rel.toString() === "relative\n", "files: relative paths join the session cwd");
r = await sb.runCommand("/vercel/sandbox/run.sh");
check((await r.stdout()) === "ran\n", "files: the mode is kept");
r = await sb.runCommand({ cmd: "stat", args: ["-c", "%U", "/vercel/sandbox/hello.txt"] });
const owner = (await r.stdout()).trim();
check(owner === "vercel-sandbox", "files: extracted by the sandbox user [DOC]", owner);
check((await sb.readFile({ path: "/vercel/sandbox/missing.txt" })) === null, "files: a missing file reads as null [TS readFile 404]");

// Lifecycle.
const got = await Sandbox.get({ ...creds, name: "interop-ts" });
check(got.currentSession().sessionId === sb.currentSession().sessionId, "lifecycle: get by name");
const page = await Sandbox.list({ ...creds });
check(page.sandboxes.some((s) => s.name === "interop-ts"), "lifecycle: listed");
const oldSession = sb.currentSession().sessionId;
await sb.stop();
// [TS withResume] a 410 makes the SDK resume (GET ?resume=true) and retry once.
r = await sb.runCommand({ cmd: "cat", args: ["/vercel/sandbox/rel/nested.txt"] });
check((await r.stdout()) === "relative\n" && sb.currentSession().sessionId !== oldSession, "lifecycle: resumed in a new session with its files");

// Faults, armed by the Rust test (route `exec`): 1) 429 Retry-After: 1: [TS with-retry] waits and
// retries, the command runs once; 2) cut before the final {command}: [TS runCommand] StreamError
// `stream_ended_early`; 3) 500 after the command ran: [TS with-retry] retries 5xx, even this POST,
// so the command runs twice (the documented trap a Rust client must not copy).
writeFileSync(process.env.FAULTS_READY, "");
while (!existsSync(process.env.FAULTS_ARMED)) await new Promise((res) => setTimeout(res, 50));
r = await sb.runCommand({ cmd: "sh", args: ["-c", "echo a >> /tmp/ran429"] });
check(r.exitCode === 0, "faults: 429 is retried after Retry-After");
try {
  r = await sb.runCommand({ cmd: "sh", args: ["-c", "echo partial"] });
  check(false, "faults: cut", j(r.exitCode));
} catch (e) {
  check(e.name === "StreamError" && e.code === "stream_ended_early", "faults: a cut stream is StreamError(stream_ended_early)", `${e.name} ${e.code} ${e.message}`);
}
r = await sb.runCommand({ cmd: "sh", args: ["-c", "echo b >> /tmp/ran500"] });
check(r.exitCode === 0, "faults: a 500 is retried", r.exitCode);
const counts = await sb.runCommand({ cmd: "sh", args: ["-c", "wc -l < /tmp/ran429; wc -l < /tmp/ran500"] });
check((await counts.stdout()) === "1\n2\n", "faults: 429 ran once, 500 ran twice", j(await counts.stdout()));

// Snapshots. [TS sandbox.ts snapshot()] POST …/sessions/{id}/snapshot -> Snapshot; the session
// stops [DOC vercel.com/docs/sandbox/concepts/snapshots] and the next use resumes it [TS
// withResume]. [TS sandbox.ts create] `source: {type: "snapshot", snapshotId}`. [TS snapshot.ts
// Snapshot.list] `listSnapshots({name, limit, cursor})`, answered `{snapshots, pagination:
// {count, next}}` [TS validators.ts CursorPagination]; its paginator follows `next` until null.
{
  const { Snapshot } = await import("@vercel/sandbox");
  await sb.writeFiles([{ path: "/vercel/sandbox/snap.txt", content: "before\n" }]);
  const a = await sb.snapshot();
  check(a.status === "created" && a.snapshotId && a.sizeBytes > 0, "snapshot: created, with a size", j([a.status, a.snapshotId, a.sizeBytes]));
  await sb.writeFiles([{ path: "/vercel/sandbox/snap.txt", content: "after\n" }]);
  const b = await sb.snapshot({ expiration: 0 });
  check(b.snapshotId !== a.snapshotId && b.expiresAt == null, "snapshot: a second one, expiration 0 never expires", j([b.snapshotId, b.expiresAt]));
  const first = await Snapshot.list({ ...creds, name: "interop-ts", limit: 1 });
  check(first.snapshots.length === 1 && first.pagination.count === 1 && typeof first.pagination.next === "string", "snapshot: list pages by limit, next is a cursor", j(first.pagination));
  const second = await Snapshot.list({ ...creds, name: "interop-ts", limit: 1, cursor: first.pagination.next });
  check(second.snapshots.length === 1 && second.pagination.next === null && second.snapshots[0].id !== first.snapshots[0].id, "snapshot: the cursor gives the next page, the last has next null", j(second.pagination));
  const all = await (await Snapshot.list({ ...creds, name: "interop-ts", limit: 1 })).toArray();
  check(j(all.map((s) => s.id).sort()) === j([a.snapshotId, b.snapshotId].sort()), "snapshot: the paginator follows next through every page", j(all.map((s) => s.id)));
  const copy = await Sandbox.create({ ...creds, name: "interop-ts-from-snap", source: { type: "snapshot", snapshotId: a.snapshotId } });
  const r2 = await copy.runCommand({ cmd: "cat", args: ["/vercel/sandbox/snap.txt"] });
  check((await r2.stdout()) === "before\n", "snapshot: a sandbox created from it has the old files", j(await r2.stdout()));
  await copy.delete();
  const got2 = await Snapshot.get({ ...creds, snapshotId: a.snapshotId });
  await got2.delete();
  await b.delete();
  const left = await Snapshot.list({ ...creds, name: "interop-ts" });
  check(left.snapshots.length === 0, "snapshot: deleted ones are not listed", j(left.snapshots.map((s) => s.id)));
  try {
    await Sandbox.create({ ...creds, name: "interop-ts-from-deleted", source: { type: "snapshot", snapshotId: a.snapshotId } });
    check(false, "snapshot: create from a deleted snapshot", "created");
  } catch (e) {
    check(e instanceof APIError && e.response.status === 404, "snapshot: create from a deleted snapshot is APIError 404", `${e.response && e.response.status} ${e.message}`);
  }
}

await sb.delete();
try {
  await Sandbox.get({ ...creds, name: "interop-ts" });
  check(false, "lifecycle: deleted", "still there");
} catch (e) {
  check(e instanceof APIError && e.response.status === 404, "lifecycle: deleted (404 after)", e.message);
}
try {
  await Sandbox.create({ ...creds, token: "wrong", name: "never" });
  check(false, "errors: bad token", "accepted");
} catch (e) {
  check(e instanceof APIError && e.response.status === 403, "errors: a bad token is APIError 403", e.message);
}
// [TS session.ts domain(p)] a port declared at create has a route; `domain(p)` builds
// `https://${route.subdomain}.vercel.run` from its subdomain (it does not read the route's url)
// and throws for a port without a route. Offline the same subdomain is served under
// `.vercel.localhost` on the emulator's port: a request with that Host reaches the server.
{
  const probe = net.createServer().listen(0, "127.0.0.1");
  await new Promise((res) => probe.once("listening", res));
  const port = probe.address().port;
  await new Promise((res) => probe.close(res));
  const rs = await Sandbox.create({ ...creds, name: "interop-ts-routes", ports: [port] });
  const domain = rs.domain(port);
  const sub = domain.replace(/^https:\/\//, "").replace(/\.vercel\.run$/, "");
  check(domain === `https://${sub}.vercel.run` && sub.endsWith(`-${port}`), "routes: domain(port) is the route's vercel.run URL", domain);
  await rs.runCommand({ cmd: "sh", args: ["-c", "mkdir -p www && echo routed > www/index.html"] });
  const serve = `cd www && if command -v python3 >/dev/null; then exec python3 -m http.server ${port}; else exec busybox httpd -f -p ${port}; fi`;
  await rs.runCommand({ cmd: "sh", args: ["-c", serve], detached: true });
  const emulator = new globalThis.URL(URL);
  let body = null, last = null;
  for (let i = 0; i < 100 && body === null; i++) {
    try {
      body = await new Promise((res, rej) => {
        const req = http.get({ host: emulator.hostname, port: emulator.port, path: "/index.html", headers: { host: `${sub}.vercel.localhost:${emulator.port}` } }, (r) => {
          let b = "";
          r.on("data", (d) => (b += d));
          r.on("end", () => (r.statusCode === 200 ? res(b) : rej(new Error(`HTTP ${r.statusCode}: ${b}`))));
        });
        req.on("error", rej);
      });
    } catch (e) {
      last = e;
      await new Promise((res) => setTimeout(res, 100));
    }
  }
  check(body === "routed\n", "routes: the route's subdomain reaches the sandbox's port", `${j(body)} ${last}`);
  await rs.delete();
}
console.log("OK");
