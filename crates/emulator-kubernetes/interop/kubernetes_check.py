"""The official Kubernetes Python client (kubernetes 37.0.2) against the emulator.

Every expectation is what a real API server does, with its source:
- [CREATE] apiserver pkg/endpoints/handlers/create.go (201 with the object), customresource
  strategy PrepareForCreate (uid, resourceVersion, generation 1)
- [ERR] apimachinery pkg/api/errors/errors.go (NotFound, AlreadyExists, Conflict, Invalid texts)
- [STORE] apiserver pkg/registry/generic/registry/store.go (custom resources need a
  resourceVersion on update: 422; a stale one is 409 Conflict)
- [GEN] customresource strategy PrepareForUpdate (generation moves with the spec only)
- [WATCH] apiserver storage/cacher watch_cache.go (resourceVersion 0: the current state as ADDED),
  cacher.go (too old: ERROR 410, which kubernetes/watch/watch.py raises as ApiException 410)
- [DISC] apiserver pkg/endpoints/installer.go (singularName; "" on subresources), discovery.go
- [EXEC] apimachinery util/httpstream/wsstream/conn.go (protocol negotiation, v5 close),
  apiserver util/proxy streamtranslator.go (status on channel 3), kubernetes/stream/ws_client.py
- [RESIZE] client-go tools/remotecommand/resize.go (GetResizeFunc: a json.Encoder of
  TerminalSize{Width, Height}, no JSON tags, on the resize stream, channel 4 of the WebSocket
  protocols); the kubelet applies it to the exec's terminal (TIOCSWINSZ), which `stty size` reads
- [PF] kubernetes pkg/kubelet/cri/streaming/portforward/websocket.go (v4.channel.k8s.io: a data
  and an error channel per port in the order asked, each opened by the port in 2 bytes
  little-endian; a port that cannot be reached is "error forwarding port <p> to pod <id>, uid
  <uid>: <err>" on its error channel), kubernetes/stream/ws_client.py (PortForward), the runtime
  behind it: agent-sandbox examples/python-runtime-sandbox/main.py (uvicorn on 8888, POST /execute)
- [POD] pkg/registry/core/pod/strategy.go (ToSelectableFields; exec on a missing pod: 404)
- [CRD] agent-sandbox k8s/crds/*.yaml (enums, required fields, defaults)
- [AS] agent-sandbox controllers (claim adoption keeps the warm Sandbox's name; Ready/
  DependenciesReady "Pod is Ready"; ownerReferences; garbage collection)
- [SUSPEND] agent-sandbox controllers/sandbox_controller.go at 2fd412d: reconcilePod deletes the
  owned pod while spec.operatingMode is Suspended and makes it again (same name) when Running;
  computeSuspendedCondition (True/PodTerminated "Pod has been terminated. Sandbox is suspended"
  once the pod is gone, False/NotSuspended when Running: persistent, never removed);
  computeReadyCondition (False/SandboxSuspended "Sandbox is suspended"); status.podIPs cleared
  without a pod; the claim copies its Sandbox's Ready (sandboxclaim_controller.go
  computeReadyCondition). A new pod's container starts from its image (kubernetes.io, Concepts,
  Storage, Volumes: a container's files are lost when it ends)
- [PVC] agent-sandbox controllers/sandbox_controller.go at 2fd412d: reconcilePVCs (a claim
  "<template>-<sandbox>" per volumeClaimTemplates entry, the template's labels plus the
  sandbox-name-hash label, SetControllerReference to the Sandbox; run in either operating mode)
  and MergeVolumeClaimVolumes (the pod's volume of that name is the claim); the PV controller
  binds a claim (pv_controller.go: status.phase Bound); the StorageObjectInUseProtection
  admission plugin adds the kubernetes.io/pvc-protection finalizer, which the pvc-protection
  controller removes once no pod uses the claim; the garbage collector deletes owned objects
  with their owner

Prints one "ok <name>" per check and "OK" at the end.
"""

import json
import os
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream
from kubernetes.stream.ws_client import RESIZE_CHANNEL

from checks import check, ok

G, V, NS = "extensions.agents.x-k8s.io", "v1beta1", "default"
POOL = os.environ["WARM_POOL"]


def api_error(f, *a, **kw):
    try:
        f(*a, **kw)
    except ApiException as e:
        return e
    return None


def body_of(e):
    import json
    try:
        return json.loads(e.body)
    except Exception:
        return {}


api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
core = client.CoreV1Api(api)
co = client.CustomObjectsApi(api)

# Discovery, through the strict generated models.
v = client.VersionApi(api).get_code()
check(v.major == "1" and v.git_version.startswith("v1."), "discovery: version", repr(v))
av = client.CoreApi(api).get_api_versions()
check(av.versions == ["v1"] and av.server_address_by_client_cidrs, "discovery: /api [DISC]", repr(av))
res = {r.name: r for r in core.get_api_resources().resources}
check("pods" in res and res["pods"].singular_name == "pod" and res["pods/exec"].singular_name == "",
      "discovery: core v1 resources, singularName [DISC]", repr(sorted(res)))
groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
check({"agents.x-k8s.io", G} <= groups, "discovery: /apis groups", repr(groups))
cr = {r.name for r in co.get_api_resources(G, V).resources}
check({"sandboxclaims", "sandboxwarmpools", "sandboxwarmpools/scale", "sandboxtemplates"} <= cr,
      "discovery: extensions resources", repr(cr))

# The registry.
claim = {"apiVersion": f"{G}/{V}", "kind": "SandboxClaim",
         "metadata": {"name": "interop-claim", "labels": {"suite": "interop"}},
         "spec": {"warmPoolRef": {"name": POOL}}}
created = co.create_namespaced_custom_object(G, V, NS, "sandboxclaims", claim)
m = created["metadata"]
check(m["uid"] and isinstance(m["resourceVersion"], str) and m["generation"] == 1,
      "create: uid, resourceVersion, generation 1 [CREATE]", repr(m))
e = api_error(co.create_namespaced_custom_object, G, V, NS, "sandboxclaims", claim)
check(e is not None and e.status == 409 and body_of(e).get("reason") == "AlreadyExists",
      "create: duplicate is 409 AlreadyExists [ERR]", repr(e))
e = api_error(co.get_namespaced_custom_object, G, V, NS, "sandboxclaims", "nope")
check(e is not None and e.status == 404
      and body_of(e).get("message") == 'sandboxclaims.extensions.agents.x-k8s.io "nope" not found',
      "get: missing is 404 with the NotFound text [ERR]", repr(e))
bad = {"apiVersion": f"{G}/{V}", "kind": "SandboxClaim", "metadata": {"name": "bad"}, "spec": {}}
e = api_error(co.create_namespaced_custom_object, G, V, NS, "sandboxclaims", bad)
b = body_of(e) if e else {}
check(e is not None and e.status == 422 and b.get("reason") == "Invalid"
      and any(c.get("field") == "spec.warmPoolRef" for c in b.get("details", {}).get("causes", [])),
      "create: missing warmPoolRef is 422 Invalid with its cause [CRD]", repr(b))
sb_bad = {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": "bad-mode"},
          "spec": {"operatingMode": "Paused", "podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
e = api_error(co.create_namespaced_custom_object, "agents.x-k8s.io", V, NS, "sandboxes", sb_bad)
check(e is not None and e.status == 422, "create: operatingMode outside its enum is 422 [CRD]", repr(e))

# generation moves with the spec only; merge patches are what the client sends.
p = co.patch_namespaced_custom_object(G, V, NS, "sandboxclaims", "interop-claim",
                                      {"metadata": {"labels": {"touched": "yes"}}})
check(p["metadata"]["generation"] == 1 and p["metadata"]["labels"]["touched"] == "yes",
      "patch: a metadata change keeps generation [GEN]", repr(p["metadata"]))
p = co.patch_namespaced_custom_object(G, V, NS, "sandboxclaims", "interop-claim",
                                      {"spec": {"lifecycle": {"ttlSecondsAfterFinished": 60}}})
check(p["metadata"]["generation"] == 2 and p["spec"]["lifecycle"]["shutdownPolicy"] == "Retain",
      "patch: a spec change moves generation; the schema's default applies [GEN][CRD]", repr(p))
stale = dict(p)
stale["metadata"] = dict(p["metadata"], resourceVersion="1")
e = api_error(co.replace_namespaced_custom_object, G, V, NS, "sandboxclaims", "interop-claim", stale)
check(e is not None and e.status == 409 and body_of(e).get("reason") == "Conflict"
      and "the object has been modified" in body_of(e).get("message", ""),
      "replace: a stale resourceVersion is 409 Conflict [STORE]", repr(e))
no_rv = dict(p)
no_rv["metadata"] = {k: v for k, v in p["metadata"].items() if k != "resourceVersion"}
e = api_error(co.replace_namespaced_custom_object, G, V, NS, "sandboxclaims", "interop-claim", no_rv)
check(e is not None and e.status == 422, "replace: no resourceVersion is 422 [STORE]", repr(e))

# One watch on the claim from "0": ADDED first, then the controller binds it and it turns Ready.
w = watch.Watch()
first, sandbox_name, ready = None, None, False
for ev in w.stream(co.list_namespaced_custom_object, G, V, NS, "sandboxclaims",
                   field_selector="metadata.name=interop-claim", resource_version="0",
                   timeout_seconds=60):
    first = first or ev["type"]
    st = ev["object"].get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))
    sandbox_name = (st.get("sandbox") or {}).get("name")
    if ready and sandbox_name:
        w.stop()
check(first == "ADDED", "watch: resourceVersion 0 replays the current state as ADDED [WATCH]", repr(first))
check(ready and sandbox_name and sandbox_name.startswith(POOL + "-"),
      "claim: adopts a warm Sandbox, which keeps its pool-generated name [AS]", repr(sandbox_name))
sb = co.get_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", sandbox_name)
rc = [c for c in sb["status"]["conditions"] if c["type"] == "Ready"][0]
check(rc["status"] == "True" and rc["reason"] == "DependenciesReady" and rc["message"] == "Pod is Ready"
      and sb["status"]["podIPs"], "sandbox: Ready/DependenciesReady, pod IPs [AS]", repr(sb["status"]))
owner = sb["metadata"]["ownerReferences"][0]
check(owner["kind"] == "SandboxClaim" and owner["name"] == "interop-claim" and owner["controller"],
      "sandbox: owned by the claim after adoption [AS]", repr(owner))

# From a compacted version: HTTP 200, then one ERROR event carrying 410, which Watch raises
# (with timeout_seconds it does not retry).
e = None
try:
    for _ in watch.Watch().stream(co.list_namespaced_custom_object, G, V, NS, "sandboxclaims",
                                  resource_version="1", timeout_seconds=5):
        pass
except ApiException as ex:
    e = ex
check(e is not None and e.status == 410, "watch: a compacted resourceVersion is 410 Expired [WATCH]", repr(e))

# Pods, by the Sandbox's selector and by phase.
pod_name = sb["metadata"].get("annotations", {}).get("agents.x-k8s.io/pod-name", sandbox_name)
sel = sb["status"]["selector"]
pods = core.list_namespaced_pod(NS, label_selector=sel).items
check(len(pods) == 1 and pods[0].metadata.name == pod_name and pods[0].status.phase == "Running",
      "pods: the Sandbox's selector finds its Running pod [AS]", repr([p.metadata.name for p in pods]))
running = core.list_namespaced_pod(NS, field_selector="status.phase=Running").items
check(any(p.metadata.name == pod_name for p in running), "pods: fieldSelector status.phase [POD]", "")

# Exec: separate streams, the exit from the status channel, v5 negotiated.
r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS,
           command=["sh", "-c", "printf out; printf err >&2; exit 3"],
           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
r.run_forever(timeout=20)
check(r.subprotocol == "v5.channel.k8s.io", "exec: v5.channel.k8s.io negotiated [EXEC]", repr(r.subprotocol))
check(r.read_stdout() == "out" and r.read_stderr() == "err" and r.returncode == 3,
      "exec: stdout, stderr and exit 3 apart [EXEC]", "")
r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS, command=["cat"],
           stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
r.write_stdin("hello stdin")
r.close_channel(0)
r.run_forever(timeout=20)
check(r.read_stdout() == "hello stdin" and r.returncode == 0, "exec: stdin closed with [255, 0] ends cat [EXEC]", "")
try:
    r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS, command=["execseam-no-such-binary"],
               stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    r.run_forever(timeout=20)
    rc_value = r.returncode
    check(False, "exec: a missing binary is an InternalError status", repr(rc_value))
except ValueError:
    ok("exec: a missing binary is an InternalError status, not an exit code [EXEC]")
r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS, command=["sh", "-c", "echo $TERM; echo a"],
           stderr=True, stdin=False, stdout=True, tty=True, _preload_content=False)
r.run_forever(timeout=20)
out = r.read_stdout()
check("xterm" in out and "\r\n" in out, "exec: tty has TERM=xterm and \\r\\n [EXEC]", repr(out))
r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS, command=["sh", "-c", "read x; stty size"],
           stderr=True, stdin=True, stdout=True, tty=True, _preload_content=False)
r.write_channel(RESIZE_CHANNEL, json.dumps({"Width": 101, "Height": 33}))
r.write_stdin("go\n")
r.run_forever(timeout=20)
out = r.read_stdout()
check("33 101" in out and r.returncode == 0, "exec: a resize on channel 4 sizes the tty [RESIZE]", repr(out))
try:
    stream(core.connect_get_namespaced_pod_exec, "no-such-pod", NS, command=["true"],
           stderr=True, stdin=False, stdout=True, tty=False)
    check(False, "exec: a missing pod is a 404 before the upgrade", "no error")
except ApiException as ex:
    check("404" in str(ex.reason), "exec: a missing pod is a 404 before the upgrade [POD]", repr(ex.reason))

# Port-forward: the runtime on 8888 over one forwarded connection, a refused port's error.
pf = portforward(core.connect_get_namespaced_pod_portforward, pod_name, NS, ports="8888,1234")
sock = pf.socket(8888)
sock.settimeout(20)
body = json.dumps({"command": "echo forwarded"}).encode()
sock.sendall(b"POST /execute HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\n"
             b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
answer = b""
while True:
    chunk = sock.recv(65536)
    if not chunk:
        break
    answer += chunk
head, _, payload = answer.partition(b"\r\n\r\n")
check(head.startswith(b"HTTP/1.1 200") and json.loads(payload).get("stdout") == "forwarded\n",
      "portforward: a connection to the pod's port 8888 reaches its runtime [PF]", repr(answer[:200]))
deadline = time.time() + 10
while pf.error(1234) is None and time.time() < deadline:
    time.sleep(0.05)
err = pf.error(1234) or ""
check(err.startswith("error forwarding port 1234 to pod "),
      "portforward: a port nothing listens on is an error on its error channel [PF]", repr(err))
e = api_error(portforward, core.connect_get_namespaced_pod_portforward, "no-such-pod", NS, ports="8888")
check(e is not None and "404" in str(e.reason), "portforward: a missing pod is a 404 before the upgrade [POD]",
      repr(e))

# Suspend and resume through spec.operatingMode (a merge patch, as kubectl and the SDKs send).
def sandbox_conditions(name):
    # A new object has no status until its controller writes one (the create drops it).
    s = co.get_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", name)
    return s, {c["type"]: c for c in s.get("status", {}).get("conditions", [])}


old_uid = core.read_namespaced_pod(pod_name, NS).metadata.uid
r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS, command=["sh", "-c", "echo x > /tmp/before-suspend"],
           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
r.run_forever(timeout=20)
co.patch_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", sandbox_name,
                                  {"spec": {"operatingMode": "Suspended"}})
conds = {}
for _ in range(300):
    s, conds = sandbox_conditions(sandbox_name)
    if conds.get("Suspended", {}).get("status") == "True":
        break
    time.sleep(0.1)
susp, rdy = conds.get("Suspended", {}), conds.get("Ready", {})
check(susp.get("reason") == "PodTerminated"
      and susp.get("message") == "Pod has been terminated. Sandbox is suspended"
      and rdy.get("status") == "False" and rdy.get("reason") == "SandboxSuspended"
      and rdy.get("message") == "Sandbox is suspended" and not s["status"].get("podIPs"),
      "suspend: Suspended True/PodTerminated, Ready False/SandboxSuspended, no pod IPs [SUSPEND]", repr(conds))
e = api_error(core.read_namespaced_pod, pod_name, NS)
check(e is not None and e.status == 404, "suspend: the pod is deleted, the Sandbox kept [SUSPEND]", repr(e))
crc = {}
for _ in range(100):
    c = co.get_namespaced_custom_object(G, V, NS, "sandboxclaims", "interop-claim")
    crc = {x["type"]: x for x in c["status"].get("conditions", [])}.get("Ready", {})
    if crc.get("reason") == "SandboxSuspended":
        break
    time.sleep(0.1)
check(crc.get("status") == "False" and crc.get("reason") == "SandboxSuspended",
      "suspend: the claim's Ready copies the Sandbox's [SUSPEND]", repr(crc))
co.patch_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", sandbox_name,
                                  {"spec": {"operatingMode": "Running"}})
for _ in range(300):
    s, conds = sandbox_conditions(sandbox_name)
    if conds.get("Ready", {}).get("status") == "True":
        break
    time.sleep(0.1)
new_pod = core.read_namespaced_pod(pod_name, NS)
check(conds.get("Ready", {}).get("status") == "True" and conds.get("Suspended", {}).get("reason") == "NotSuspended"
      and conds["Suspended"]["status"] == "False" and new_pod.metadata.uid != old_uid and s["status"].get("podIPs"),
      "resume: Ready again, Suspended False/NotSuspended (kept), a new pod under the same name [SUSPEND]",
      repr(conds))
r = stream(core.connect_get_namespaced_pod_exec, pod_name, NS,
           command=["sh", "-c", "test -e /tmp/before-suspend && echo kept || echo gone"],
           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
r.run_forever(timeout=20)
out = r.read_stdout()
check(out == "gone\n" and r.returncode == 0,
      "resume: the new pod's container starts from its image, without the old files [SUSPEND]", repr(out))

# volumeClaimTemplates: one claim per template, owned by the Sandbox, kept while it is suspended.
def run_in(pod, script):
    r = stream(core.connect_get_namespaced_pod_exec, pod, NS, command=["sh", "-c", script],
               stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    r.run_forever(timeout=20)
    return r.read_stdout()


def wait_condition(name, kind, status):
    for _ in range(300):
        s, conds = sandbox_conditions(name)
        if conds.get(kind, {}).get("status") == status:
            return s
        time.sleep(0.1)
    return s


vsb = {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": "interop-volume"},
       "spec": {"podTemplate": {"spec": {"containers": [{
                    "name": "c", "image": "registry.k8s.io/agent-sandbox/python-runtime-sandbox:latest",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"suite": "interop"}},
                                          "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}}}]}}
vs = co.create_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", vsb)
wait_condition("interop-volume", "Ready", "True")
pvc = core.read_namespaced_persistent_volume_claim("data-interop-volume", NS)
owner = [o for o in (pvc.metadata.owner_references or []) if o.controller]
check(pvc.status.phase == "Bound" and pvc.metadata.labels.get("suite") == "interop"
      and "kubernetes.io/pvc-protection" in (pvc.metadata.finalizers or [])
      and pvc.metadata.labels.get("agents.x-k8s.io/sandbox-name-hash")
      and owner and owner[0].kind == "Sandbox" and owner[0].uid == vs["metadata"]["uid"]
      and any(v.persistent_volume_claim and v.persistent_volume_claim.claim_name == "data-interop-volume"
              for v in core.read_namespaced_pod("interop-volume", NS).spec.volumes),
      "volumes: a Bound claim <template>-<sandbox>, controlled by the Sandbox, in the pod's volumes [PVC]",
      repr(pvc.metadata))
run_in("interop-volume", "echo v > /data/kept; echo x > /tmp/lost")
co.patch_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", "interop-volume",
                                  {"spec": {"operatingMode": "Suspended"}})
wait_condition("interop-volume", "Suspended", "True")
kept = core.read_namespaced_persistent_volume_claim("data-interop-volume", NS)
co.patch_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", "interop-volume",
                                  {"spec": {"operatingMode": "Running"}})
wait_condition("interop-volume", "Ready", "True")
out = run_in("interop-volume", "cat /data/kept; test -e /tmp/lost && echo lost-kept; true")
check(kept.metadata.uid == pvc.metadata.uid and out == "v\n",
      "volumes: the claim outlives a suspend; its files are in the resumed pod, the rest is not [PVC]",
      repr(out))
co.delete_namespaced_custom_object("agents.x-k8s.io", V, NS, "sandboxes", "interop-volume")
gone = None
for _ in range(200):
    gone = api_error(core.read_namespaced_persistent_volume_claim, "data-interop-volume", NS)
    if gone is not None:
        break
    time.sleep(0.1)
check(gone is not None and gone.status == 404, "volumes: the garbage collector deletes the claim with its Sandbox [PVC]",
      repr(gone))

# Delete the claim: the garbage collector takes its Sandbox and its pod.
co.delete_namespaced_custom_object(G, V, NS, "sandboxclaims", "interop-claim")
gone = False
for _ in range(200):
    e = api_error(co.get_namespaced_custom_object, "agents.x-k8s.io", V, NS, "sandboxes", sandbox_name)
    if e is not None and e.status == 404 and not [p for p in core.list_namespaced_pod(NS).items
                                                 if p.metadata.name == pod_name]:
        gone = True
        break
    time.sleep(0.1)
check(gone, "delete: the claim's Sandbox and pod are garbage-collected [AS]", sandbox_name)
print("OK")
