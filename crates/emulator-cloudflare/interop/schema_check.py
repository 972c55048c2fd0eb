"""Runs schemathesis with the bridge's OpenAPI document against the emulator.

Environment: CLOUDFLARE_SANDBOX_WORKER_URL, CLOUDFLARE_SANDBOX_API_KEY, EXECSEAM_OPENAPI (the
document), EXECSEAM_SCHEMATHESIS_HOOKS (schema_hooks.py). Excluded checks and why are listed here
and in docs/adapters/cloudflare.md.
"""

import os
import subprocess
import sys
import tempfile

url = os.environ["CLOUDFLARE_SANDBOX_WORKER_URL"]
key = os.environ["CLOUDFLARE_SANDBOX_API_KEY"]
hooks = os.environ["EXECSEAM_SCHEMATHESIS_HOOKS"]

EXCLUDED_CHECKS = [
    # The bridge (Hono) answers 404 to a method a route does not have, not 405; the emulator
    # reproduces that.
    "unsupported_method",
    "allow_header_conformance",
    # Valid-by-the-document input is legitimately refused by the bridge: a `cwd` or file path
    # outside /workspace (403), a sandbox that has no such session (502), a random tar (502).
    "positive_data_acceptance",
]

env = dict(os.environ)
env["SCHEMATHESIS_HOOKS"] = os.path.splitext(os.path.basename(hooks))[0]
env["PYTHONPATH"] = os.path.dirname(hooks) + os.pathsep + env.get("PYTHONPATH", "")

cmd = [
    sys.executable,
    "-m",
    "schemathesis.cli",
    "run",
    os.environ["EXECSEAM_OPENAPI"],
    "--url",
    url,
    "--header",
    f"Authorization: Bearer {key}",
    "--checks",
    "all",
    "--exclude-checks",
    ",".join(EXCLUDED_CHECKS),
    # The PTY route is a WebSocket upgrade, which schemathesis cannot drive.
    "--exclude-operation-id",
    "ptyTerminal",
    "--mode",
    "positive",
    "--phases",
    "examples,coverage,fuzzing",
    "--max-examples",
    os.environ.get("EXECSEAM_SCHEMA_EXAMPLES", "25"),
    "--request-timeout",
    "30",
    "--workers",
    "1",
    "--seed",
    "7",
    "--suppress-health-check",
    "all",
    "--no-color",
    # No example database in the working tree: every run starts from the seed.
    "--generation-database",
    ":memory:",
]
print("running:", " ".join(cmd[2:4]), "...", flush=True)
# Run from a temporary directory: schemathesis keeps state under its working directory.
with tempfile.TemporaryDirectory() as tmp:
    r = subprocess.run(cmd, env=env, cwd=tmp)
if r.returncode != 0:
    print(f"schema check: FAILED (schemathesis exit {r.returncode})", flush=True)
    sys.exit(1)
print("schema check: passed", flush=True)
