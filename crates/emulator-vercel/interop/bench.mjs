// Times `true` through the official TS SDK: N runs in one sandbox; prints one ms per line.
import { Sandbox } from "@vercel/sandbox";
const URL = process.env.VERCEL_API_URL;
const sb = await Sandbox.create({
  token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID,
  fetch: (u, init) => fetch(String(u).replace("https://vercel.com/api", URL), init),
});
await sb.runCommand("true");
for (let i = 0; i < Number(process.env.BENCH_N); i++) {
  const t = performance.now();
  const r = await sb.runCommand("true");
  if (r.exitCode !== 0) throw new Error("exit " + r.exitCode);
  console.log((performance.now() - t).toFixed(3));
}
await sb.delete();
