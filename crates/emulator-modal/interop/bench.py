"""The official client's side of execseam-modal's exec-latency benchmark
(crates/adapter-modal/benches/exec_latency.rs): attaches to the sandbox the benchmark created,
then for each line on stdin runs one command (the line's words as argv), reads stdout and stderr
to their ends and waits for the exit, and prints the seconds it took and the bytes it got."""

import sys
import time

import modal

sb = modal.Sandbox.from_id(sys.argv[1])
p = sb.exec("true")
p.stdout.read()
p.stderr.read()
p.wait()
print("ready", flush=True)
for line in sys.stdin:
    argv = line.split()
    t = time.perf_counter()
    p = sb.exec(*argv, text=False)
    out = p.stdout.read()
    err = p.stderr.read()
    code = p.wait()
    elapsed = time.perf_counter() - t
    print(f"{elapsed:.6f} {len(out)} {len(err)} {code}", flush=True)
