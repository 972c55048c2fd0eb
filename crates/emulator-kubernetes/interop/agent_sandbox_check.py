"""The official agent-sandbox Python SDK (k8s-agent-sandbox 1.0.8) against the emulator, in
direct-URL mode through the router.

Every expectation is what the real controllers, router and runtime do, with its source
(kubernetes-sigs/agent-sandbox at 2fd412d; the SDK's own sdist):
- [CLAIM] extensions/controllers/sandboxclaim_controller.go: warm adoption keeps the warm
  Sandbox's name; a cold start names the Sandbox like the claim; WarmPoolNotFound and
  TemplateNotFound conditions (the SDK's k8s_helper._watch_claim raises on them)
- [SB] controllers/sandbox_controller.go: Ready/DependenciesReady "Pod is Ready"
- [RT] examples/python-runtime-sandbox/main.py: shlex.split, no shell, cwd /app, exit 1 with
  "Failed to execute command: ..." when the command cannot start; upload/download/list/exists
- [ROUTER] sandbox-router/sandbox_router.py: Bearer auth (401), routing by X-Sandbox-Pod-IP
- [GC] ownerReferences + the garbage collector: terminate() removes the Sandbox (the SDK's
  test_client.py expects status() to become SandboxNotFound)

Prints one "ok <name>" per check and "OK" at the end.
"""

import os
import time

from kubernetes import client, config
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.exceptions import (
    SandboxNotFoundError,
    SandboxRequestError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

from checks import check, ok

NS = "default"
POOL = os.environ["WARM_POOL"]
TEMPLATE = os.environ["TEMPLATE"]
G, V = "extensions.agents.x-k8s.io", "v1beta1"


api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
co = client.CustomObjectsApi(api)


def raises(exc, call, name):
    """`call()` raises `exc` (ok `name`); returning fails the check."""
    try:
        call()
    except exc:
        ok(name)
        return
    check(False, name, "no error")


def empty_pool(name, template):
    """A SandboxWarmPool `name` of no replicas on `template`."""
    co.create_namespaced_custom_object(G, V, NS, "sandboxwarmpools", {
        "apiVersion": f"{G}/{V}", "kind": "SandboxWarmPool", "metadata": {"name": name},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": template}}})


def sdk(token):
    conn = SandboxDirectConnectionConfig(
        api_url=os.environ["ROUTER_URL"],
        extra_headers={"Authorization": f"Bearer {token}"},
    )
    return SandboxClient(connection_config=conn, api_client=api)


c = sdk(os.environ["ROUTER_TOKEN"])
sb = c.create_sandbox(POOL, namespace=NS, sandbox_ready_timeout=60, labels={"suite": "sdk"})
check(sb.sandbox_id.startswith(POOL + "-") and sb.claim_name.startswith("sandbox-claim-"),
      "create_sandbox: a warm Sandbox adopted, its pool-generated name kept [CLAIM]",
      f"{sb.sandbox_id} / {sb.claim_name}")
check(sb.status() == ("SandboxReady", "Pod is Ready"), "status(): SandboxReady, Pod is Ready [SB]", repr(sb.status()))

r = sb.commands.run("echo hi")
check(r.stdout == "hi\n" and r.stderr == "" and r.exit_code == 0, "commands.run: echo [RT]", repr(r))
r = sb.commands.run("ls /nope")
check(r.exit_code == 2 and r.stderr and r.stdout == "", "commands.run: a failing command's exit and stderr [RT]", repr(r))
r = sb.commands.run("execseam-no-such-binary --flag")
check(r.exit_code == 1 and r.stdout == "" and r.stderr.startswith("Failed to execute command:"),
      "commands.run: a program that does not exist is exit 1 with the runtime's text [RT]", repr(r))
r = sb.commands.run("echo $HOME 'a b'")
check(r.stdout == "$HOME a b\n", "commands.run: shlex, no shell [RT]", repr(r))
r = sb.commands.run("pwd")
check(r.stdout == "/app\n", "commands.run: runs in /app [RT]", repr(r))

sb.files.write("d/a.txt", b"x\x00y")
check(sb.files.read("d/a.txt") == b"x\x00y", "files: write then read [RT]", "")
check(sb.files.exists("d/a.txt") and not sb.files.exists("nope.txt"), "files: exists [RT]", "")
entries = {e.name: e for e in sb.files.list(".")}
check("d" in entries and entries["d"].type == "directory", "files: list [RT]", repr(entries))
r = sb.commands.run("cat d/a.txt")
check(r.stdout == "x\x00y", "files: the runtime's commands see the uploaded file [RT]", repr(r))

check(sb.claim_name in c.list_all_sandboxes(namespace=NS, label_selector="suite=sdk"),
      "list_all_sandboxes: by label selector", "")

bad = sdk("wrong-token")
h = bad.get_sandbox(sb.claim_name, namespace=NS)
try:
    h.commands.run("true")
    check(False, "router: a bad token is 401", "no error")
except SandboxRequestError as e:
    check(e.status_code == 401, "router: a bad token is 401 [ROUTER]", repr(e))

raises(
    SandboxWarmPoolNotFoundError,
    lambda: c.create_sandbox("missing-pool", namespace=NS, sandbox_ready_timeout=30),
    "create_sandbox: a missing pool raises SandboxWarmPoolNotFoundError [CLAIM]",
)

empty_pool("orphan-pool", "missing-template")
raises(
    SandboxTemplateNotFoundError,
    lambda: c.create_sandbox("orphan-pool", namespace=NS, sandbox_ready_timeout=30),
    "create_sandbox: a pool on a missing template raises SandboxTemplateNotFoundError [CLAIM]",
)

empty_pool("cold-pool", TEMPLATE)
cold = c.create_sandbox("cold-pool", namespace=NS, sandbox_ready_timeout=60)
check(cold.sandbox_id == cold.claim_name, "create_sandbox: no warm member: a cold Sandbox named like the claim [CLAIM]",
      f"{cold.sandbox_id} / {cold.claim_name}")
check(cold.commands.run("echo cold").stdout == "cold\n", "commands.run on a cold sandbox [RT]", "")
cold.terminate()

claim = sb.claim_name
sb.terminate()
status = None
for _ in range(100):
    status = sb.status()[0]
    if status == "SandboxNotFound":
        break
    time.sleep(0.1)
check(status == "SandboxNotFound", "terminate(): the Sandbox is garbage-collected [GC]", repr(status))
raises(
    SandboxNotFoundError,
    lambda: c.get_sandbox(claim, namespace=NS, resolve_timeout=5),
    "get_sandbox after terminate raises SandboxNotFoundError [GC]",
)
print("OK")
