"""grpcio (Google's gRPC runtime) against the ax emulator, with AX's calling pattern.

The stubs are generated at run time by grpcio-tools' protoc from execseam's guest.proto (the
proto's path comes in AX_PROTO_DIR); the endpoint in EXECSEAM_SANDBOX (the guest address the emulator announces). Prints one `ok ...` line
per check and `done` at the end; any failure raises.
"""
import atexit
import importlib
import os
import shutil
import sys
import tempfile

import grpc
from grpc_tools import protoc

proto_dir = os.environ["AX_PROTO_DIR"]
out = tempfile.mkdtemp(prefix="ax-interop-")
# The generated stubs are this run's alone: gone when the script ends, whatever its outcome.
atexit.register(shutil.rmtree, out, ignore_errors=True)
include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
rc = protoc.main([
    "protoc",
    f"-I{proto_dir}",
    f"-I{include}",
    f"--python_out={out}",
    f"--grpc_python_out={out}",
    "ateenv/v1alpha/guest.proto",
])
assert rc == 0, f"protoc failed: {rc}"
sys.path.insert(0, out)
pb = importlib.import_module("ateenv.v1alpha.guest_pb2")
rpc = importlib.import_module("ateenv.v1alpha.guest_pb2_grpc")

channel = grpc.insecure_channel(os.environ["EXECSEAM_SANDBOX"])
procs = rpc.ProcessServiceStub(channel)
files = rpc.FileSystemServiceStub(channel)


def follow(pid, stdout_offset=0, stderr_offset=0):
    o, e, exit_ = b"", b"", None
    for m in procs.StreamProcessOutput(pb.StreamProcessOutputRequest(
            process_id=pid, stdout_offset=stdout_offset, stderr_offset=stderr_offset, follow=True)):
        kind = m.WhichOneof("output")
        if kind == "stdout":
            o += m.stdout
        elif kind == "stderr":
            e += m.stderr
        elif kind == "exit":
            exit_ = m.exit
    return o, e, exit_


# AX: StartProcess{stdin}, WriteProcessInput{data}... {close}, StreamProcessOutput{follow}.
p = procs.StartProcess(pb.StartProcessRequest(
    command=["sh", "-c", "read x; printf 'got %s' \"$x\"; printf err >&2; exit 7"], stdin=True))
assert p.process_id.startswith("proc-") and len(p.process_id) == 29, p.process_id
assert p.state == pb.PROCESS_STATE_RUNNING, p
resp = procs.WriteProcessInput(iter([
    pb.WriteProcessInputRequest(process_id=p.process_id, data=b"42\n"),
    pb.WriteProcessInputRequest(process_id=p.process_id, close=True),
]))
assert resp.bytes_written == 3, resp
o, e, x = follow(p.process_id)
assert (o, e) == (b"got 42", b"err"), (o, e)
assert x is not None and x.exit_code == 7 and x.state == pb.PROCESS_STATE_EXITED, x
print("ok stdin, separate streams, exit 7")

o, e, x = follow(p.process_id, stdout_offset=4)
assert (o, x.exit_code) == (b"42", 7), (o, x)
print("ok resume from an offset")

p = procs.StartProcess(pb.StartProcessRequest(command=["sh", "-c", "printf ready; exec sleep 30"]))
got = b""
for m in procs.StreamProcessOutput(pb.StreamProcessOutputRequest(process_id=p.process_id, follow=True)):
    if m.WhichOneof("output") == "stdout":
        got += m.stdout
        if got == b"ready":
            procs.SignalProcess(pb.SignalProcessRequest(process_id=p.process_id, signal=pb.SIGNAL_INT))
    elif m.WhichOneof("output") == "exit":
        assert m.exit.exit_code == 130, m.exit
        break
print("ok SIGINT gives 130")

try:
    procs.GetProcess(pb.GetProcessRequest(process_id="proc-nope"))
    raise AssertionError("GetProcess of an unknown id succeeded")
except grpc.RpcError as err:
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
    assert err.details() == 'process "proc-nope" not found', err.details()
print("ok NOT_FOUND for an unknown process")

try:
    procs.StartProcess(pb.StartProcessRequest(command=["execseam-no-such-program"]))
    raise AssertionError("a missing program started")
except grpc.RpcError as err:
    assert err.code() == grpc.StatusCode.INTERNAL, err
    assert err.details().startswith("starting process: exec: "), err.details()
print("ok INTERNAL starting process for a missing program")

data = bytes(range(256)) * 1000
w = files.WriteFile(iter([
    pb.WriteFileRequest(path="/workspace/interop/blob", chunk=data[:100000]),
    pb.WriteFileRequest(chunk=data[100000:]),
]))
assert w.bytes_written == len(data), w
back = b"".join(c.chunk for c in files.ReadFile(pb.ReadFileRequest(path="/workspace/interop/blob")))
assert back == data
o, _, x = follow(procs.StartProcess(pb.StartProcessRequest(
    command=["wc", "-c", "/workspace/interop/blob"])).process_id)
assert o.split()[0] == str(len(data)).encode() and x.exit_code == 0, o
print("ok WriteFile/ReadFile, seen by commands")

try:
    files.WriteFile(iter([]))
    raise AssertionError("an empty WriteFile stream was accepted")
except grpc.RpcError as err:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and err.details() == "no file data received", err
print("ok an empty WriteFile is INVALID_ARGUMENT")

try:
    list(files.ReadFile(pb.ReadFileRequest(path="/workspace/none")))
    raise AssertionError("a missing file was read")
except grpc.RpcError as err:
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
print("ok NOT_FOUND for a missing file")

# Large output with gRPC's default limits (4 MiB receive, as AX's grpc.NewClient has): the guest
# sends a delta as several messages of at most 1 MiB (agent-substrate/env
# guest/process/service.go@859629af, logChunkBytes = 1 << 20), and ReadFile streams 64 KiB chunks
# (guest/filesystem/service.go@012c258c).
MiB = 1 << 20
p = procs.StartProcess(pb.StartProcessRequest(command=[
    "sh", "-c", "head -c 9437184 /dev/zero; head -c 2097152 /dev/zero >&2"]))
sizes = {"stdout": [], "stderr": []}
x = None
for m in procs.StreamProcessOutput(pb.StreamProcessOutputRequest(process_id=p.process_id, follow=True)):
    kind = m.WhichOneof("output")
    if kind == "exit":
        x = m.exit
    else:
        sizes[kind].append(len(getattr(m, kind)))
assert x is not None and x.exit_code == 0, x
assert sum(sizes["stdout"]) == 9 * MiB and sum(sizes["stderr"]) == 2 * MiB, sizes
assert max(sizes["stdout"] + sizes["stderr"]) <= MiB, sizes
assert len(sizes["stdout"]) >= 9, sizes
print("ok 9 MiB of output in messages of at most 1 MiB, default gRPC limits")

big = os.urandom(3 * MiB) * 3
w = files.WriteFile(iter(
    [pb.WriteFileRequest(path="/workspace/interop/big", chunk=big[:MiB])]
    + [pb.WriteFileRequest(chunk=big[i:i + MiB]) for i in range(MiB, len(big), MiB)]))
assert w.bytes_written == len(big), w
chunks = [c.chunk for c in files.ReadFile(pb.ReadFileRequest(path="/workspace/interop/big"))]
assert b"".join(chunks) == big and max(map(len, chunks)) <= 64 * 1024, [len(c) for c in chunks[:3]]
print("ok a 9 MiB ReadFile in chunks of at most 64 KiB, default gRPC limits")
print("done")
