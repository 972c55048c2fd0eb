"""Times `true` through the official Python SDK's one-shot exec; prints one ms per line."""
import os, time
from northflank import ApiClient

c = ApiClient(api_token=os.environ["NORTHFLANK_API_TOKEN"], base_url=os.environ["NORTHFLANK_API_BASE_URL"])
run = lambda: c.exec.run_service_command(project_id=os.environ["NORTHFLANK_PROJECT_ID"], service_id=os.environ["NORTHFLANK_SERVICE_ID"], command=["true"])
run()
for _ in range(int(os.environ["BENCH_N"])):
    t = time.perf_counter()
    assert run().exit_code == 0
    print(f"{(time.perf_counter() - t) * 1000:.3f}", flush=True)
