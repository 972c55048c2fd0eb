// Times `true` through the official JS client's execServiceCommand; prints one ms per line.
import { ApiClient, ApiClientInMemoryContextProvider } from "@northflank/js-client";
const env = process.env;
const ctx = new ApiClientInMemoryContextProvider();
await ctx.addContext({ name: "bench", token: env.NORTHFLANK_API_TOKEN, host: env.NORTHFLANK_API_BASE_URL });
const api = new ApiClient(ctx, { throwErrorOnHttpErrorCode: true });
const target = { projectId: env.NORTHFLANK_PROJECT_ID, serviceId: env.NORTHFLANK_SERVICE_ID };
await api.exec.execServiceCommand(target, { command: ["true"] });
for (let i = 0; i < Number(env.BENCH_N); i++) {
  const t = performance.now();
  const r = await api.exec.execServiceCommand(target, { command: ["true"] });
  if (r.commandResult.exitCode !== 0) throw new Error("exit " + JSON.stringify(r.commandResult));
  console.log((performance.now() - t).toFixed(3));
}
