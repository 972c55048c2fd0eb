#!/usr/bin/env python3
# The emulator's stand-in for Modal's in-sandbox helper /__modal/.bin/modal-sandbox-fs-tools
# (a closed Rust binary, crates/modal-sandbox-fs-tools, which `sb.filesystem` execs).
#
# Input: one argv argument, a JSON object with one key naming the command, as the 1.6.4 client
# builds it (modal/_utils/sandbox_fs_utils.py make_*_command):
#   {"ReadFile": {"path"}}                      file bytes on stdout
#   {"WriteFile": {"path"}}                     content on stdin; parents are created
#   {"ListFiles": {"path"}}                     a JSON array of entries on stdout
#   {"Stat": {"path"}}                          one JSON entry on stdout (lstat: a link is itself)
#   {"MakeDirectory": {"path", "parents"}}
#   {"Remove": {"path", "recursive"}}
#   {"Watch": {"path", "recursive", "filter", "timeout_secs"}}   one JSON event per line
# Failure: exit 1 and one JSON object on stderr, {"version": 1, "error_kind", "message"[, "detail"]};
# the client maps error_kind to its SandboxFilesystem*Error classes (raise_*_error).
#
# Where the client is silent, the formats follow Modal's own mock of the helper for the client's
# unit tests (modal-labs/modal-client py/test/supports/mock_sandbox_fs_tools.py, which says it
# matches the Rust crate's `build_file_entry`): entry keys name, path, type
# ("file"|"directory"|"symlink"), size, mode (st_mode), permissions (four octal digits, "0644"),
# owner and group (names, else numbers), modified_time (float seconds), symlink_target for
# links; ListFiles sorted by name with absolute paths; the error kinds and messages. Watch is
# not in that mock: its event shape {"event_type", "paths"} is what the client parses
# (modal/sandbox/_filesystem.py watch); this helper polls, the real one uses inotify [inferred].
import errno
import grp
import json
import os
import pwd
import select
import shutil
import stat
import sys
import time

MAX_READ = 5 * 1024 * 1024 * 1024


def fail(kind, message, detail=None):
    payload = {"version": 1, "error_kind": kind, "message": message}
    if detail is not None:
        payload["detail"] = detail
    sys.stderr.write(json.dumps(payload))
    sys.exit(1)


def fail_os(e, not_found="path does not exist"):
    if isinstance(e, FileNotFoundError):
        fail("NotFound", not_found)
    if isinstance(e, NotADirectoryError):
        fail("NotDirectory", "a component of the path is not a directory")
    if isinstance(e, PermissionError):
        fail("PermissionDenied", "permission denied")
    if isinstance(e, IsADirectoryError):
        fail("IsDirectory", "expected a file path")
    fail("Io", "I/O error", detail=str(e))


def name_of(table, ident):
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


def entry(name, path, st):
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(st.st_mode):
        kind = "directory"
    else:
        kind = "file"
    e = {
        "name": name,
        "path": path,
        "type": kind,
        "size": st.st_size,
        "mode": st.st_mode,
        "permissions": "%04o" % stat.S_IMODE(st.st_mode),
        "owner": name_of(pwd.getpwuid, st.st_uid),
        "group": name_of(grp.getgrgid, st.st_gid),
        "modified_time": st.st_mtime,
    }
    if kind == "symlink":
        e["symlink_target"] = os.readlink(path)
    return e


def emit(obj):
    sys.stdout.write(json.dumps(obj))
    sys.stdout.flush()


def read_file(path):
    try:
        st = os.stat(path)
    except OSError as e:
        fail_os(e)
    if stat.S_ISDIR(st.st_mode):
        fail("IsDirectory", "expected a file path")
    if st.st_size > MAX_READ:
        fail("FileTooLarge", "file is %d bytes, which exceeds the %d byte limit" % (st.st_size, MAX_READ))
    try:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    except OSError as e:
        fail_os(e)


def write_file(path):
    if os.path.isdir(path):
        fail("IsDirectory", "expected a file path")
    parent = os.path.dirname(path)
    if parent:
        if os.path.exists(parent) and not os.path.isdir(parent):
            fail("AlreadyExists", "a component of the path is not a directory")
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            fail_os(e)
    try:
        with open(path, "wb") as f:
            while True:
                chunk = sys.stdin.buffer.read(1 << 16)
                if not chunk:
                    break
                f.write(chunk)
    except OSError as e:
        fail_os(e)


def list_files(path):
    try:
        st = os.stat(path)
    except OSError as e:
        fail_os(e)
    if not stat.S_ISDIR(st.st_mode):
        fail("IsFile", "expected a directory path")
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        fail_os(e)
    out = []
    for n in names:
        full = os.path.join(path, n)
        try:
            out.append(entry(n, os.path.abspath(full), os.lstat(full)))
        except OSError:
            continue
    emit(out)


def stat_path(path):
    try:
        st = os.lstat(path)
    except OSError as e:
        fail_os(e)
    emit(entry(os.path.basename(path.rstrip("/")), path, st))


def make_directory(path, parents):
    try:
        if parents:
            os.makedirs(path, exist_ok=True)
        else:
            os.mkdir(path)
    except FileExistsError:
        fail("PathAlreadyExists", "path already exists")
    except FileNotFoundError:
        fail("NotFound", "parent directory does not exist")
    except OSError as e:
        fail_os(e)


def remove(path, recursive):
    if not os.path.lexists(path):
        fail("NotFound", "path does not exist")
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.remove(path)
        elif recursive:
            shutil.rmtree(path)
        else:
            os.rmdir(path)
    except OSError as e:
        if e.errno == errno.ENOTEMPTY:
            fail("DirectoryNotEmpty", "directory is not empty")
        fail_os(e)


def snapshot(path, recursive):
    seen = {}
    try:
        st = os.lstat(path)
    except OSError:
        return seen
    seen[path] = (st.st_mtime_ns, st.st_size)
    if stat.S_ISDIR(st.st_mode):
        for root, dirs, files in os.walk(path):
            for n in dirs + files:
                p = os.path.join(root, n)
                try:
                    s = os.lstat(p)
                except OSError:
                    continue
                seen[p] = (s.st_mtime_ns, s.st_size)
            if not recursive:
                break
    return seen


def watch(path, recursive, filt, timeout):
    if not os.path.lexists(path):
        fail("NotFound", "path does not exist")
    deadline = time.monotonic() + timeout if timeout else None
    before = snapshot(path, recursive)
    while deadline is None or time.monotonic() < deadline:
        # Ends when the client closes stdin (the client does so when it stops watching).
        r, _, _ = select.select([sys.stdin], [], [], 0.1)
        if r and not sys.stdin.buffer.read1(4096):
            return
        after = snapshot(path, recursive)
        events = []
        for p in sorted(after.keys() - before.keys()):
            events.append(("Create", p))
        for p in sorted(before.keys() - after.keys()):
            events.append(("Remove", p))
        for p in sorted(after.keys() & before.keys()):
            if after[p] != before[p] and not os.path.isdir(p):
                events.append(("Modify", p))
        for kind, p in events:
            if filt is None or kind in filt:
                sys.stdout.write(json.dumps({"event_type": kind, "paths": [p]}) + "\n")
        sys.stdout.flush()
        before = after


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: modal-sandbox-fs-tools <command-json>")
    try:
        command = json.loads(sys.argv[1])
        (name, args), = command.items()
        path = args["path"]
    except (ValueError, AttributeError, KeyError, TypeError):
        fail("InvalidArgument", "invalid command", detail=sys.argv[1])
    if name == "ReadFile":
        read_file(path)
    elif name == "WriteFile":
        write_file(path)
    elif name == "ListFiles":
        list_files(path)
    elif name == "Stat":
        stat_path(path)
    elif name == "MakeDirectory":
        make_directory(path, args.get("parents", True))
    elif name == "Remove":
        remove(path, args.get("recursive", False))
    elif name == "Watch":
        watch(path, args.get("recursive", False), args.get("filter"), args.get("timeout_secs"))
    else:
        fail("InvalidArgument", "unknown command", detail=name)


if __name__ == "__main__":
    main()
