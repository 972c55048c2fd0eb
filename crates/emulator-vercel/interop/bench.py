"""Times `true` through the official Python SDK: N runs in one sandbox; prints one ms per line."""
import os, time
from vercel.sandbox.sync import SandboxCredentials, SandboxServiceOptions, SyncSandboxClient

creds = SandboxCredentials(token=os.environ["VERCEL_TOKEN"], team_id=os.environ["VERCEL_TEAM_ID"], project_id=os.environ["VERCEL_PROJECT_ID"])
c = SyncSandboxClient.create(options=SandboxServiceOptions(base_url=os.environ["VERCEL_API_URL"], credentials_factory=lambda: creds))
with c.create_sandbox() as sb:
    sb.run_process("true")
    for _ in range(int(os.environ["BENCH_N"])):
        t = time.perf_counter()
        r = sb.run_process("true")
        assert r.returncode == 0
        print(f"{(time.perf_counter() - t) * 1000:.3f}", flush=True)
c.close()
