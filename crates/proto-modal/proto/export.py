#!/usr/bin/env python3
"""Exports the Modal API schema that execseam-modal builds from, out of the pinned `modal` wheel.

The wheel ships no `.proto` files, only the generated `modal_proto/*_pb2.py`, whose serialized
`FileDescriptorProto`s are the exact schema the client speaks. This script takes those bytes
(`DESCRIPTOR.serialized_pb`, byte-identical to what the wheel embeds), keeps the RPCs listed below
and every message and enum they reach (whole, with every field and field number as published), and
writes one `FileDescriptorSet` that `build.rs` hands to tonic-prost-build. Pruning keeps the build
small: the full `ModalClient` service has 285 RPCs and 650 messages.

Usage (with the interop virtualenv, which pins modal==1.6.4):
    python export.py            # rewrites modal-1.6.4.binpb
    python export.py --check    # exits 1 if the checked-in file differs from a fresh export
"""

import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

import modal_version
from modal_proto import api_pb2, task_command_router_pb2

PINNED = "1.6.4"
OUT = Path(__file__).with_name(f"modal-{PINNED}.binpb")

# The RPCs the 1.6.4 client makes for sandbox create / connect / list / exec / filesystem /
# terminate (V2 path, plus the V1 path where cheap), read from modal/sandbox/*.py, and for
# filesystem snapshots (`snapshot_filesystem`, modal.experimental `image_delete`), directory
# snapshots and image mounts, and tunnels.
METHODS = {
    "modal.client.ModalClient": [
        "AppGetOrCreate",
        "AuthTokenGet",
        "ClientHello",
        "EnvironmentGetOrCreate",
        "ImageDelete",
        "ImageGetOrCreate",
        "ImageJoinStreaming",
        "SandboxCreate",
        "SandboxCreateV2",
        "SandboxGetCommandRouterAccess",
        "SandboxGetFromName",
        "SandboxGetFromNameV2",
        "SandboxGetTaskId",
        "SandboxGetTaskIdV2",
        # Tunnels of the `open_ports` (`Sandbox.tunnels()`).
        "SandboxGetTunnels",
        "SandboxGetTunnelsV2",
        "SandboxList",
        "SandboxListV2",
        "SandboxTagsGet",
        "SandboxTagsGetV2",
        "SandboxTagsSet",
        "SandboxTagsSetV2",
        "SandboxTerminate",
        "SandboxTerminateV2",
        "SandboxWait",
        "SandboxWaitV2",
        "TaskGetCommandRouterAccess",
    ],
    "modal.task_command_router.TaskCommandRouter": [
        # The entrypoint's stdio of a V2 sandbox (sandbox/_impl_v2.py make_stdio).
        "SandboxStdinWriteV2",
        "SandboxStdioReadV2",
        "TaskExecPoll",
        "TaskExecStart",
        "TaskExecStdinStatus",
        "TaskExecStdinWrite",
        "TaskExecStdinWriteStream",
        "TaskExecStdioRead",
        "TaskExecWait",
        # Sandbox.mount_image / unmount_image / snapshot_directory (sandbox/_common.py
        # mount_image_via_tcr, unmount_image_via_tcr, snapshot_directory_via_tcr).
        "TaskMountDirectory",
        "TaskSnapshotDirectory",
        # Sandbox.snapshot_filesystem (sandbox/_common.py snapshot_filesystem_via_tcr).
        "TaskSnapshotFilesystem",
        "TaskUnmountDirectory",
    ],
}
# Messages used outside any RPC signature: the status details Modal attaches to errors
# (`grpc-status-details-bin` carries an `RPCStatus` whose `details` are `Any`s; the client reads
# `RPCRetryPolicy` from them, modal/_utils/grpc_utils.py `get_server_retry_policy`).
EXTRA = [".modal.client.RPCStatus", ".modal.client.RPCRetryPolicy"]


def files():
    import google.protobuf.any_pb2 as any_pb2
    import google.protobuf.empty_pb2 as empty_pb2
    import google.protobuf.struct_pb2 as struct_pb2
    import google.protobuf.timestamp_pb2 as timestamp_pb2
    import google.protobuf.wrappers_pb2 as wrappers_pb2

    mods = [any_pb2, empty_pb2, struct_pb2, timestamp_pb2, wrappers_pb2, api_pb2, task_command_router_pb2]
    return [descriptor_pb2.FileDescriptorProto.FromString(m.DESCRIPTOR.serialized_pb) for m in mods]


def index(fds):
    """Maps every type's full name (nested ones too) to (file, top-level full name)."""
    owner = {}

    def walk(prefix, top, msg):
        name = f"{prefix}.{msg.name}"
        owner[name] = top
        for n in msg.nested_type:
            walk(name, top, n)
        for e in msg.enum_type:
            owner[f"{name}.{e.name}"] = top

    for fd in fds:
        pkg = "." + fd.package
        for m in fd.message_type:
            walk(pkg, f"{pkg}.{m.name}", m)
        for e in fd.enum_type:
            owner[f"{pkg}.{e.name}"] = f"{pkg}.{e.name}"
    return owner


def closure(fds, roots):
    owner = index(fds)
    tops = {}
    for fd in fds:
        pkg = "." + fd.package
        for m in fd.message_type:
            tops[f"{pkg}.{m.name}"] = m
        for e in fd.enum_type:
            tops[f"{pkg}.{e.name}"] = e
    keep, todo = set(), [owner[r] for r in roots]

    def refs(msg):
        for f in msg.field:
            if f.type_name:
                yield owner[f.type_name]
        for n in msg.nested_type:
            yield from refs(n)

    while todo:
        t = todo.pop()
        if t in keep:
            continue
        keep.add(t)
        node = tops[t]
        if isinstance(node, descriptor_pb2.DescriptorProto):
            todo.extend(refs(node))
    return keep


def export():
    if modal_version.__version__ != PINNED:
        sys.exit(f"modal {modal_version.__version__} is installed, {PINNED} is pinned")
    fds = files()
    roots = list(EXTRA)
    for fd in fds:
        for s in fd.service:
            wanted = METHODS.get(f"{fd.package}.{s.name}")
            if wanted is None:
                continue
            have = {m.name: m for m in s.method}
            missing = [w for w in wanted if w not in have]
            if missing:
                sys.exit(f"{fd.package}.{s.name} has no {missing}")
            for w in wanted:
                roots += [have[w].input_type, have[w].output_type]
    keep = closure(fds, roots)
    out = descriptor_pb2.FileDescriptorSet()
    for fd in fds:
        pkg = "." + fd.package
        pruned = descriptor_pb2.FileDescriptorProto()
        pruned.CopyFrom(fd)
        del pruned.message_type[:]
        del pruned.enum_type[:]
        del pruned.service[:]
        pruned.message_type.extend(m for m in fd.message_type if f"{pkg}.{m.name}" in keep)
        pruned.enum_type.extend(e for e in fd.enum_type if f"{pkg}.{e.name}" in keep)
        for s in fd.service:
            wanted = METHODS.get(f"{fd.package}.{s.name}")
            if wanted:
                ps = pruned.service.add()
                ps.CopyFrom(s)
                del ps.method[:]
                ps.method.extend(m for m in s.method if m.name in wanted)
        out.file.append(pruned)
    return out.SerializeToString(deterministic=True)


def main():
    data = export()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_bytes() != data:
            sys.exit(f"{OUT.name} is stale: re-run {Path(__file__).name} with modal=={PINNED}")
        print(f"ok {OUT.name} matches modal=={PINNED}")
        return
    OUT.write_bytes(data)
    print(f"wrote {OUT.name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
