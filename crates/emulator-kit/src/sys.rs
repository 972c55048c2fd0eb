//! The few system calls the sandboxes need that std does not offer: entering a sandbox's
//! namespaces from one thread, dropping privileges in a child before `exec`, whiteouts and opaque
//! directories for the overlay, and signals. Each call is a thin wrapper with its SAFETY comment;
//! nothing else in the harness is `unsafe`.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// Moves the calling thread (only it) into these namespaces (`(ns file, CLONE_NEW*)`): it first
/// stops sharing its filesystem attributes (root, cwd) with the process's other threads, which
/// `setns` into a mount namespace requires, so the process's other threads keep the host's view.
/// Processes the thread starts afterwards are born inside (for the pid namespace, only its
/// children are). On any error the thread must not be used for sandbox work.
pub fn enter_on_this_thread(namespaces: &[(&File, libc::c_int)]) -> io::Result<()> {
    // SAFETY: unshare(2) takes flags only; CLONE_FS affects this thread's fs_struct alone.
    check(unsafe { libc::unshare(libc::CLONE_FS) })?;
    for (file, kind) in namespaces {
        // SAFETY: setns(2) takes an open namespace fd (borrowed for the call) and a type flag.
        check(unsafe { libc::setns(file.as_raw_fd(), *kind) })?;
    }
    Ok(())
}

/// Makes the calling thread (only it: raw system calls, not glibc's process-wide wrappers) do
/// file operations as `creds`: supplementary groups, then fs gid and fs uid. The kernel then
/// checks permissions as that user and drops the thread's file capabilities (CAP_DAC_OVERRIDE,
/// CAP_CHOWN, …), and new files belong to it. The thread must be thrown away afterwards.
pub fn become_fs_user_on_this_thread(creds: &Creds) -> io::Result<()> {
    // SAFETY: raw setgroups(2) over a live slice, then setfsgid(2) and setfsuid(2), which take
    // integers; all three change this thread's credentials only.
    unsafe {
        if libc::syscall(
            libc::SYS_setgroups,
            creds.groups.len() as libc::c_long,
            creds.groups.as_ptr(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_setfsgid, creds.gid as libc::c_long);
        libc::syscall(libc::SYS_setfsuid, creds.uid as libc::c_long);
        // Both return the previous value; asking again with an invalid id (-1) reads it back.
        let uid = libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long);
        let gid = libc::syscall(libc::SYS_setfsgid, -1 as libc::c_long);
        if uid != creds.uid as libc::c_long || gid != creds.gid as libc::c_long {
            return Err(io::Error::other("setfsuid/setfsgid did not take"));
        }
    }
    Ok(())
}

/// The capabilities a sandbox's processes keep in their bounding set (Docker's default set, less
/// CAP_MKNOD: there is no device cgroup here). Root inside a sandbox can then not mount, load
/// modules, change the host's clock or network, open files by handle or trace, while it can still
/// chown, kill its own processes and bind low ports.
const KEPT_CAPS: [u32; 13] = [
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    13, // CAP_NET_RAW
    18, // CAP_SYS_CHROOT
    29, // CAP_AUDIT_WRITE
    31, // CAP_SETFCAP
];

/// Who a sandbox process runs as.
#[derive(Clone, Debug)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Makes `cmd`'s child, just before `exec`, drop the capabilities a sandbox must not have from
/// its bounding set, then take `creds` (supplementary groups, gid, uid; real, effective and
/// saved). Raw system calls: in the child only the calling thread exists, and glibc's wrappers
/// would try to synchronise threads that are not there.
pub fn drop_privileges_in_child(cmd: &mut tokio::process::Command, creds: Creds) {
    let groups: Vec<libc::gid_t> = creds.groups.clone();
    // SAFETY: the closure runs between fork and exec; it only makes system calls (prctl,
    // setgroups, setresgid, setresuid), which are async-signal-safe, over data allocated before
    // the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for cap in 0..64u32 {
                if KEPT_CAPS.contains(&cap) {
                    continue;
                }
                let r = libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                if r != 0 {
                    let e = io::Error::last_os_error();
                    // Capabilities past this kernel's last one do not exist.
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(e);
                    }
                }
            }
            let r = libc::syscall(
                libc::SYS_setgroups,
                groups.len() as libc::c_long,
                groups.as_ptr(),
            );
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            let (u, g) = (creds.uid as libc::c_long, creds.gid as libc::c_long);
            if libc::syscall(libc::SYS_setresgid, g, g, g) != 0
                || libc::syscall(libc::SYS_setresuid, u, u, u) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Creates a character device node (`0/0` is an overlayfs whiteout: it hides the lower entry).
pub fn mknod_char(path: &Path, mode: u32, major: u32, minor: u32) -> io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: `p` is a valid NUL-terminated path for the duration of the call.
    check(unsafe {
        libc::mknod(
            p.as_ptr(),
            libc::S_IFCHR | mode,
            libc::makedev(major, minor),
        )
    })
}

/// Creates a FIFO.
pub fn mkfifo(path: &Path, mode: u32) -> io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: `p` is a valid NUL-terminated path for the duration of the call.
    check(unsafe { libc::mkfifo(p.as_ptr(), mode) })
}

/// Marks a directory of an overlay's upper layer opaque: the lower directory's entries are not
/// merged into it.
pub fn set_opaque(path: &Path) -> io::Result<()> {
    let p = c_path(path)?;
    let name = c"trusted.overlay.opaque";
    // SAFETY: both strings are valid and NUL-terminated, the value is a 1-byte buffer that
    // outlives the call.
    check(unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), b"y".as_ptr().cast(), 1, 0) })
}

/// Makes `dir` (an open directory) the calling thread's working directory. Only for a thread
/// that stopped sharing its filesystem attributes ([`enter_on_this_thread`]): relative paths then
/// resolve in that directory, whatever mount namespace the thread is in.
pub fn fchdir(dir: &File) -> io::Result<()> {
    // SAFETY: fchdir(2) takes an open descriptor, borrowed for the call.
    check(unsafe { libc::fchdir(dir.as_raw_fd()) })
}

/// Mounts a fresh tmpfs (mode 0755, no setuid, no device files) at `path`, in the calling
/// thread's mount namespace.
pub fn mount_tmpfs(path: &Path) -> io::Result<()> {
    let target = c_path(path)?;
    // SAFETY: mount(2) over NUL-terminated strings that outlive the call.
    check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755".as_ptr().cast(),
        )
    })
}

/// Detaches the mount at `path` (lazily, as `umount -l`: what was beneath shows at once; a
/// process still inside keeps its view until it leaves), never following a symlink there.
pub fn unmount(path: &Path) -> io::Result<()> {
    let target = c_path(path)?;
    // SAFETY: umount2(2) over a NUL-terminated string that outlives the call, and flags.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) })
}

/// kill(2).
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    check(unsafe { libc::kill(pid, sig) })
}

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// The names of a file's extended attributes (listxattr(2), following symlinks); empty where
/// the filesystem has none.
pub fn list_xattrs(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let p = c_path(path)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `p` is NUL-terminated; `buf` is writable for `buf.len()` bytes.
        let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf
                .split(|b| *b == 0)
                .filter(|n| !n.is_empty())
                .map(<[u8]>::to_vec)
                .collect());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return Err(e);
    }
}

/// One extended attribute's value (getxattr(2), following symlinks).
pub fn get_xattr(path: &Path, name: &[u8]) -> io::Result<Vec<u8>> {
    let p = c_path(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: both strings are NUL-terminated; `buf` is writable for `buf.len()` bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// Sets an extended attribute (setxattr(2), following symlinks).
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let p = c_path(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both strings are NUL-terminated; `value` is readable for its length.
    check(unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
}

/// Removes an extended attribute (removexattr(2), following symlinks).
pub fn remove_xattr(path: &Path, name: &[u8]) -> io::Result<()> {
    let p = c_path(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) })
}

/// Opens a new pseudo-terminal pair in the devpts instance that `/dev/ptmx` resolves to on the
/// calling thread (a sandbox's own instance on a thread inside it): the master (unlocked), then
/// the slave, both close-on-exec and neither becoming this process's controlling terminal. The
/// slave comes from the master itself (`TIOCGPTPEER`, Linux 4.13), so no path is looked up
/// twice; older kernels fall back to `/dev/pts/<n>`.
pub fn open_pty() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated literal path; the returned fd is owned from here on.
    let fd = unsafe { libc::open(c"/dev/ptmx".as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let master = unsafe { OwnedFd::from_raw_fd(fd) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one c_int through the pointer, which outlives the call.
    check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new fd (or -1).
    let peer = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    let slave = if peer >= 0 {
        // SAFETY: `peer` was just returned by the kernel and nothing else owns it.
        unsafe { OwnedFd::from_raw_fd(peer) }
    } else {
        let mut n: libc::c_uint = 0;
        // SAFETY: TIOCGPTN writes one c_uint through the pointer, which outlives the call.
        check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) })?;
        let path = CString::new(format!("/dev/pts/{n}")).expect("no NUL");
        // SAFETY: a NUL-terminated path that outlives the call.
        let fd = unsafe { libc::open(path.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    Ok((master, slave))
}

/// Sets a terminal's window size (TIOCSWINSZ on its master or slave); the kernel sends SIGWINCH
/// to the terminal's foreground process group when the size changes.
pub fn set_winsize(fd: &impl AsRawFd, rows: u16, cols: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize through the pointer, which outlives the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) })
}

/// A terminal's window size `(rows, cols)` (TIOCGWINSZ).
pub fn get_winsize(fd: &impl AsRawFd) -> io::Result<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize through the pointer, which outlives the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) })?;
    Ok((ws.ws_row, ws.ws_col))
}

/// Makes an fd non-blocking (for a pty master polled by the runtime).
pub fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) F_GETFL/F_SETFL take and return integers only.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Makes `cmd`'s child, just before `exec`, the leader of a new session (and of a new process
/// group, whose id is its pid) whose controlling terminal is its stdin (the pty slave it got):
/// `setsid` then `TIOCSCTTY`, as `login`/`sshd`/`script` do. The terminal's foreground process
/// group is then the child's, so ^C typed into the master reaches it. Must not be combined with
/// `process_group` (a group leader cannot `setsid`).
pub fn controlling_tty_in_child(cmd: &mut tokio::process::Command) {
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe system
    // calls (setsid, ioctl), allocating nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Registers an owned, non-blocking file with the runtime's reactor.
pub fn async_fd(file: File) -> io::Result<tokio::io::unix::AsyncFd<File>> {
    // SAFETY: the `File` owns its fd, and the `AsyncFd` owns the `File`: the fd is neither
    // closed nor replaced while registered (`AsyncFd` deregisters it before dropping the file).
    unsafe { Ok(tokio::io::unix::AsyncFd::register(file)?) }
}

/// Makes `cmd`'s child join a cgroup before it execs, by writing "0" to that cgroup's
/// `cgroup.procs` (`procs_fd`, opened before the fork). Register it before
/// [`drop_privileges_in_child`]: only root may move a process there.
pub(crate) fn join_cgroup_in_child(cmd: &mut std::process::Command, procs_fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `write(2)` of a static byte to an fd opened before the fork is
    // async-signal-safe; nothing allocates.
    unsafe {
        cmd.pre_exec(move || join_cgroup(procs_fd));
    }
}

/// [`join_cgroup_in_child`] for a tokio command.
pub(crate) fn join_cgroup_in_child_tokio(cmd: &mut tokio::process::Command, procs_fd: RawFd) {
    // SAFETY: as in `join_cgroup_in_child`.
    unsafe {
        cmd.pre_exec(move || join_cgroup(procs_fd));
    }
}

fn join_cgroup(procs_fd: RawFd) -> io::Result<()> {
    // SAFETY: a write of one static byte to an open fd.
    let r = unsafe { libc::write(procs_fd, b"0".as_ptr().cast(), 1) };
    if r == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
