"""The official SDK's side of the benchmark suite's P2 rows (benches/suite.rs).

Usage: sdk_driver.py PROVIDER SANDBOX_ID, with the emulator's environment (its URLs pointing at
the suite's chaos proxy). Builds the SDK's client for the sandbox, runs `/bin/true` once, prints
`ready`; then for each line on stdin:

- `one`: runs `/bin/true` once, prints the seconds it took (time.perf_counter around the SDK call,
  its output read to the end and the exit code in hand);
- `conc C N`: runs N execs of `/bin/true`, C at a time on threads, prints the wall seconds and the
  number of failed execs.

- `keys`: opens a terminal through the SDK's own terminal API (e2b `pty.create`, daytona
  `process.create_pty_session`, modal `exec(pty=True)`) running ECHO, prints `ok` once ECHO said
  it runs; then `key`: types one key and prints the seconds until the terminal echoed it (the P6
  rows: keystroke to echo).
- `snap`, `from ID`, `fork`, `pause`, `resume`, `restore ID`: the SDK's own sandbox-state call
  on the sandbox (see `state`), prints its seconds and the id it made (P8).

A failure prints `error <text>`.
"""

import concurrent.futures
import os
import sys
import time

PROVIDER, SANDBOX = sys.argv[1], sys.argv[2]
# The program both sides run (suite.rs's PROGRAM): a program, not the shell builtin `true`, which
# the SDKs that take a shell string (e2b, daytona, agentcore) would run without starting a process
# while the adapter, whose argv[0] is a program, starts one.
PROGRAM = "/bin/true"
# The terminal's command on both sides of P6 (suite.rs's ECHO): the terminal echoes every key at
# once (not canonical: no line to fill), `cat` reads them, R42 says it is ready.
ECHO = "stty -icanon; echo R$((6*7)); exec cat >/dev/null"


class Keys:
    """A terminal's output as it comes (`feed`), and keys typed into it (`send`)."""

    def __init__(self):
        import threading

        self.buf = bytearray()
        self.cond = threading.Condition()
        self.send = None

    def feed(self, chunk):
        if isinstance(chunk, str):
            chunk = chunk.encode()
        with self.cond:
            self.buf.extend(chunk)
            self.cond.notify_all()

    def until(self, needle, start=0, timeout=30):
        with self.cond:
            if not self.cond.wait_for(lambda: needle in self.buf[start:], timeout):
                raise RuntimeError(f"{needle!r} never came: {bytes(self.buf[-200:])!r}")

    def key(self):
        with self.cond:
            start = len(self.buf)
        t = time.perf_counter()
        self.send(b"k")
        self.until(b"k", start)
        return time.perf_counter() - t


OPENED = [0]


def terminal():
    """Opens the SDK's terminal running ECHO; answers its Keys once ECHO runs."""
    import threading

    OPENED[0] += 1
    keys = Keys()
    if PROVIDER == "e2b":
        from e2b import Sandbox
        from e2b.sandbox.commands.command_handle import PtySize

        sbx = Sandbox.connect(SANDBOX)
        h = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
        threading.Thread(target=lambda: h.wait(on_pty=keys.feed), daemon=True).start()
        keys.send = lambda b: sbx.pty.send_stdin(h.pid, b)
        keys.send(f"exec sh -c '{ECHO}'\n".encode())
    elif PROVIDER == "daytona":
        from daytona import Daytona
        from daytona.common.pty import PtySize

        sb = Daytona().get(SANDBOX)
        h = sb.process.create_pty_session(id=f"bench-keys-{os.getpid()}-{OPENED[0]}", pty_size=PtySize(rows=24, cols=80))
        threading.Thread(target=lambda: h.wait(on_data=keys.feed), daemon=True).start()
        keys.send = lambda b: h.send_input(b.decode())
        keys.send(f"exec sh -c '{ECHO}'\n".encode())
    elif PROVIDER == "modal":
        import modal

        sb = modal.Sandbox.from_id(SANDBOX)
        p = sb.exec("sh", "-c", ECHO, pty=True)

        def read():
            for chunk in p.stdout:
                keys.feed(chunk)

        threading.Thread(target=read, daemon=True).start()

        def send(b):
            p.stdin.write(b)
            p.stdin.drain()

        keys.send = send
    else:
        raise RuntimeError(f"no terminal for {PROVIDER}")
    keys.until(b"R42")
    return keys


def state():
    """The SDK's own sandbox-state calls on SANDBOX (P8), each answering its seconds
    (time.perf_counter around the SDK's calls) and the id it made, if any: `snap`, `from ID`
    (the sandbox made is ended after the timing), `fork` (likewise), `pause`, `resume`,
    `restore ID`."""
    if PROVIDER == "e2b":
        from e2b import Sandbox

        sbx = Sandbox.connect(SANDBOX)
        return {
            "snap": lambda: (None, sbx.create_snapshot().snapshot_id),
            "from": lambda snap: (Sandbox.create(snap, timeout=120), None),
            "fork": lambda: (forked(sbx.fork(timeout=120)), None),
            "pause": lambda: (None, None) if sbx.pause() else error("pause answered False"),
            "resume": lambda: (Sandbox.connect(SANDBOX), None),
        }
    if PROVIDER == "modal":
        import modal

        sb = modal.Sandbox.from_id(SANDBOX)
        app = modal.App.lookup("execseam-bench", create_if_missing=True)
        # The image objects snapshot_filesystem gave, by id: a sandbox starts from the object
        # (Image.from_id would ask ImageFromId, which the emulator does not serve).
        images = {}

        def snap():
            img = sb.snapshot_filesystem()
            images[img.object_id] = img
            return None, img.object_id

        return {
            "snap": snap,
            "from": lambda snap: (modal.Sandbox.create(image=images[snap], app=app, timeout=60), None),
        }
    if PROVIDER == "daytona":
        from daytona import CreateSandboxFromSnapshotParams, Daytona

        d = Daytona()
        sb = d.get(SANDBOX)

        def snap():
            OPENED[0] += 1
            name = f"bench-{os.getpid()}-{OPENED[0]}"
            sb.create_snapshot(name)
            return None, name

        return {
            "snap": snap,
            "from": lambda snap: (d.create(CreateSandboxFromSnapshotParams(snapshot=snap)), None),
            "pause": lambda: (sb.stop(), None),
            "resume": lambda: (sb.start(), None),
        }
    if PROVIDER == "vercel":
        from vercel.sandbox.sync import SnapshotSource

        c = vercel_client()

        def snap():
            # The snapshot stops its source: a new running sandbox each time, made before the
            # timing and destroyed after it (as the adapter's side does); the snapshot's seconds only.
            sb = c.create_sandbox()
            t = time.perf_counter()
            made = sb.snapshot()
            elapsed = time.perf_counter() - t
            sb.destroy()
            return None, made.id, elapsed

        return {
            "snap": snap,
            "from": lambda snap: (c.create_sandbox(source=SnapshotSource(snapshot_id=snap)), None),
        }
    if PROVIDER == "sprites":
        from sprites import SpritesClient

        sprite = SpritesClient(os.environ["SPRITE_TOKEN"], base_url=os.environ["SPRITES_API_URL"]).sprite(
            os.environ["EXECSEAM_SANDBOX"]
        )

        def snap():
            # The create streams messages without the checkpoint's id: found by its comment,
            # as the adapter finds it (both sides' timings include that list).
            OPENED[0] += 1
            comment = f"bench-{os.getpid()}-{OPENED[0]}"
            list(sprite.create_checkpoint(comment))
            return None, next(c.id for c in sprite.list_checkpoints() if c.comment == comment)

        return {
            "snap": snap,
            "restore": lambda snap: (list(sprite.restore_checkpoint(snap)), None),
        }
    raise RuntimeError(f"no sandbox state for {PROVIDER}")


def error(text):
    raise RuntimeError(text)


def forked(made):
    """E2B's fork answers one sandbox or exception per fork."""
    failed = [m for m in made if isinstance(m, Exception)]
    if failed or len(made) != 1:
        end([m for m in made if not isinstance(m, Exception)])
        raise RuntimeError(f"fork: {made!r}")
    return made


def end(made):
    """Ends the sandboxes a `from` or `fork` made (not timed)."""
    for s in made if isinstance(made, list) else [made]:
        for end in ("kill", "terminate", "delete", "stop"):
            if hasattr(s, end):
                getattr(s, end)()
                break


def state_call(ops, words):
    op = ops.get(words[0])
    if op is None:
        raise RuntimeError(f"the SDK has no {words[0]}")
    t = time.perf_counter()
    made, ident, *timed = op(*words[1:])
    # An op that times only part of its work (Vercel's `snap`) answers its own seconds.
    elapsed = timed[0] if timed else time.perf_counter() - t
    if words[0] in ("from", "fork"):
        end(made)
    return f"{elapsed:.6f}" + (f" {ident}" if ident else "")


def vercel_client():
    from vercel.sandbox.sync import SandboxCredentials, SandboxServiceOptions, SyncSandboxClient

    creds = SandboxCredentials(
        token=os.environ["VERCEL_TOKEN"], team_id=os.environ["VERCEL_TEAM_ID"], project_id=os.environ["VERCEL_PROJECT_ID"]
    )
    return SyncSandboxClient.create(
        options=SandboxServiceOptions(base_url=os.environ["VERCEL_API_URL"], credentials_factory=lambda: creds)
    )


def make():
    """Returns a function that runs PROGRAM once through the SDK and returns its exit code."""
    if PROVIDER == "e2b":
        from e2b import Sandbox

        sbx = Sandbox.connect(SANDBOX)
        return lambda: sbx.commands.run(PROGRAM).exit_code
    if PROVIDER == "daytona":
        from daytona import Daytona

        sb = Daytona().get(SANDBOX)
        return lambda: sb.process.exec(PROGRAM).exit_code
    if PROVIDER == "sprites":
        from sprites import SpritesClient

        sprite = SpritesClient(os.environ["SPRITE_TOKEN"], base_url=os.environ["SPRITES_API_URL"]).sprite(
            os.environ["EXECSEAM_SANDBOX"]
        )
        return lambda: sprite.run(PROGRAM, capture_output=True).returncode
    if PROVIDER == "agentcore":
        import boto3

        c = boto3.client(
            "bedrock-agentcore",
            endpoint_url=os.environ["AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"],
            region_name=os.environ["AWS_REGION"],
            aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        )
        ident = os.environ.get("AGENTCORE_CODE_INTERPRETER_ID", "aws.codeinterpreter.v1")

        def run():
            resp = c.invoke_code_interpreter(
                codeInterpreterIdentifier=ident, sessionId=SANDBOX, name="executeCommand", arguments={"command": PROGRAM}
            )
            events = list(resp["stream"])
            return events[-1]["result"]["structuredContent"]["exitCode"]

        return run
    if PROVIDER == "modal":
        import modal

        sb = modal.Sandbox.from_id(SANDBOX)

        def run():
            p = sb.exec(PROGRAM, text=False)
            p.stdout.read()
            p.stderr.read()
            return p.wait()

        return run
    if PROVIDER == "vercel":
        sb = vercel_client().create_sandbox()
        return lambda: sb.run_process(PROGRAM).returncode
    if PROVIDER == "northflank":
        from northflank import ApiClient

        c = ApiClient(api_token=os.environ["NORTHFLANK_API_TOKEN"], base_url=os.environ["NORTHFLANK_API_BASE_URL"])
        p, s = os.environ["NORTHFLANK_PROJECT_ID"], os.environ["NORTHFLANK_SERVICE_ID"]
        return lambda: c.exec.run_service_command(project_id=p, service_id=s, command=[PROGRAM]).exit_code
    if PROVIDER == "kubernetes":
        import threading

        from kubernetes import client
        from kubernetes.stream import stream

        ns = os.environ["EXECSEAM_KUBERNETES_NAMESPACE"]
        local = threading.local()

        def core():
            # stream() swaps its ApiClient's request function during a call: one client per
            # thread, so the concurrent rows do not share one.
            if not hasattr(local, "core"):
                cfg = client.Configuration()
                cfg.host = os.environ["EXECSEAM_KUBERNETES_SERVER"]
                cfg.api_key = {"authorization": "Bearer " + os.environ["EXECSEAM_KUBERNETES_TOKEN"]}
                local.api = client.ApiClient(cfg)
                local.core = client.CoreV1Api(local.api)
            return local.core

        # The sandbox is a SandboxClaim: its bound Sandbox names the pod (the pod-name annotation,
        # else the Sandbox's own name: agent-sandbox's resolvePodName).
        co = client.CustomObjectsApi(core().api_client)
        claim = co.get_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", ns, "sandboxclaims", SANDBOX)
        name = claim["status"]["sandbox"]["name"]
        sb = co.get_namespaced_custom_object("agents.x-k8s.io", "v1beta1", ns, "sandboxes", name)
        pod = (sb["metadata"].get("annotations") or {}).get("agents.x-k8s.io/pod-name") or name

        def run():
            r = stream(core().connect_get_namespaced_pod_exec, pod, ns, command=[PROGRAM],
                       stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
            r.run_forever(timeout=60)
            r.read_stdout()
            r.read_stderr()
            return r.returncode

        return run
    raise SystemExit(f"unknown provider {PROVIDER}")


def main():
    run = make()
    code = run()
    if code != 0:
        print(f"error warm-up exit {code}", flush=True)
        return
    print("ready", flush=True)
    pool = None
    keys = None
    ops = None
    for line in sys.stdin:
        words = line.split()
        try:
            if words == ["one"]:
                t = time.perf_counter()
                code = run()
                elapsed = time.perf_counter() - t
                if code != 0:
                    raise RuntimeError(f"exit {code}")
                print(f"{elapsed:.6f}", flush=True)
            elif len(words) == 3 and words[0] == "conc":
                c, n = int(words[1]), int(words[2])
                if pool is None or pool._max_workers != c:
                    pool = concurrent.futures.ThreadPoolExecutor(max_workers=c)
                t = time.perf_counter()
                results = list(pool.map(lambda _: safe(run), range(n)))
                elapsed = time.perf_counter() - t
                print(f"{elapsed:.6f} {sum(1 for r in results if r != 0)}", flush=True)
            elif words == ["keys"]:
                keys = terminal()
                print("ok", flush=True)
            elif words == ["key"]:
                print(f"{keys.key():.6f}", flush=True)
            elif words and words[0] in ("snap", "from", "fork", "pause", "resume", "restore"):
                ops = ops or state()
                print(state_call(ops, words), flush=True)
            else:
                print(f"error unknown request {line.strip()!r}", flush=True)
        except Exception as e:  # noqa: BLE001 -- reported to the suite
            print(f"error {type(e).__name__}: {e}".replace("\n", " "), flush=True)


def safe(run):
    try:
        return run()
    except Exception:  # noqa: BLE001 -- counted as an error
        return -1


main()
