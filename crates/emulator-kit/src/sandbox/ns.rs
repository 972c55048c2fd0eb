//! [`Isolation::Namespaces`](super::Isolation): a sandbox is a long-lived init process in its own
//! pid, mount, UTS and IPC namespaces, whose root filesystem is an overlay over the host's `/`
//! with a per-sandbox upper layer; commands and file operations enter those namespaces from a
//! short-lived thread of this process (the fast launcher). See the [module docs](super).

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::etc;
use super::freeze::{self, Cgroup};
use super::spec::{Mount, SandboxSpec, User};
use crate::sys;

const INIT: &str = include_str!("init.sh");
pub(crate) const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `p` quoted for a POSIX shell (`'…'`, a `'` as `'\''`).
fn sh_quote(p: &[u8]) -> Vec<u8> {
    let mut out = b"'".to_vec();
    for &b in p {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// Top-level host directories a sandbox sees (read-only below its upper layer): the system.
const SYSTEM_DIRS: [&str; 14] = [
    "bin", "boot", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin", "sys", "usr",
    "var", "snap",
];
/// Top-level directories a sandbox gets fresh and empty (the host's are hidden).
const FRESH_DIRS: [(&str, u32); 8] = [
    ("home", 0o755),
    ("root", 0o700),
    ("tmp", 0o1777),
    ("mnt", 0o755),
    ("media", 0o755),
    ("srv", 0o755),
    ("run", 0o755),
    ("dev", 0o755),
];

/// Sandboxes whose teardown has not finished (their processes or state may still exist).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// How many sandboxes of this process still exist or are being torn down.
pub(crate) fn pending() -> usize {
    PENDING.load(Ordering::SeqCst)
}

/// The namespaces of one running sandbox.
pub(crate) struct Namespaces {
    /// Open namespace files of the init, in the order a thread enters them.
    files: Vec<(File, libc::c_int)>,
    /// The pid namespace's inode, to recognise the sandbox's processes from the host.
    pid_ns: u64,
    /// The init's pid on the host.
    pub(crate) init: i32,
    /// The sandbox's `/etc/group`, to resolve supplementary groups.
    pub(crate) group_file: String,
    /// `unshare`, the init's parent: killing it kills the init (`--kill-child`), and with it
    /// every process of the pid namespace.
    unshare: Mutex<Option<std::process::Child>>,
    /// The write end of the init's stdin: closing it (also when this process dies) ends the init.
    lifeline: Mutex<Option<io::PipeWriter>>,
    /// Every process of the sandbox, from birth (`None`: no writable cgroup v2 here; pause
    /// with signals).
    cgroup: Option<Cgroup>,
    /// Paused: new processes are refused, the others frozen.
    paused: AtomicBool,
}

crate::debug_fields!(Namespaces: pid_ns);

fn ns_inode(path: impl AsRef<Path>) -> io::Result<u64> {
    Ok(std::fs::metadata(path)?.ino())
}

/// Creates `path` (and its missing parents, root-owned 0755) as a directory.
fn mkdir(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn write(path: &Path, text: &str, mode: u32, gid: u32) -> io::Result<()> {
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    std::os::unix::fs::chown(path, Some(0), Some(gid))
}

/// Where `m` is mounted in the upper layer: a directory's is created here (`None`); a file's
/// parent is, and the file's path is returned for the caller to create.
fn mount_point(upper: &Path, m: &Mount) -> io::Result<Option<PathBuf>> {
    if m.host.is_dir() {
        upper_dir(upper, &m.sandbox)?;
        return Ok(None);
    }
    let (parent, name) = m.sandbox.rsplit_once('/').unwrap_or(("", &m.sandbox));
    Ok(Some(upper_dir(upper, parent)?.join(name)))
}

fn rel(sandbox_path: &str) -> &str {
    sandbox_path.trim_start_matches('/')
}

/// Creates `sandbox_path` in the upper layer with its missing parents (root-owned 0755); a
/// whiteout on the way (a hidden host entry) becomes an opaque directory, so the directory starts
/// empty rather than showing the host's.
fn upper_dir(upper: &Path, sandbox_path: &str) -> io::Result<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut p = upper.to_path_buf();
    for part in rel(sandbox_path).split('/').filter(|c| !c.is_empty()) {
        p.push(part);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => continue,
            Ok(m) if m.file_type().is_char_device() => {
                std::fs::remove_file(&p)?;
                mkdir(&p, 0o755)?;
                sys::set_opaque(&p)?;
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{sandbox_path}: {} is not a directory", p.display()),
                ));
            }
            Err(_) => mkdir(&p, 0o755)?,
        }
    }
    Ok(p)
}

/// Fills the upper layer: fresh top-level directories (opaque, so the host's `/home`, `/root`,
/// `/tmp`, … are not merged in), whiteouts over every other non-system top-level entry (the
/// checkout under `/work`, `/data`, …), `/dev`, the account files, the homes and directories, and
/// the mount points.
fn prepare_upper(upper: &Path, spec: &SandboxSpec, mounts: &[Mount]) -> io::Result<String> {
    mkdir(upper, 0o755)?;
    for entry in std::fs::read_dir("/")? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if SYSTEM_DIRS.contains(&name.as_ref()) || FRESH_DIRS.iter().any(|(d, _)| *d == name) {
            continue;
        }
        sys::mknod_char(&upper.join(name.as_ref()), 0o000, 0, 0)?;
    }
    for (dir, mode) in FRESH_DIRS {
        let p = upper.join(dir);
        mkdir(&p, mode)?;
        sys::set_opaque(&p)?;
    }
    let var_tmp = upper.join("var/tmp");
    mkdir(&var_tmp, 0o1777)?;
    sys::set_opaque(&var_tmp)?;
    // Hide this process's working directory and home too when they lie in a system directory
    // (a checkout under /usr/src, say); the fresh and hidden top-level entries cover the rest.
    for p in [
        std::env::current_dir().ok(),
        std::env::var_os("HOME").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    {
        let mut parts = p.components().skip(1);
        let top = parts
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        if top.is_some_and(|t| SYSTEM_DIRS.contains(&t.as_str())) && parts.next().is_some() {
            let hidden = upper.join(p.strip_prefix("/").unwrap_or(&p));
            if let Some(parent) = hidden.parent() {
                std::fs::create_dir_all(parent)?;
            }
            if !hidden.exists() {
                sys::mknod_char(&hidden, 0o000, 0, 0)?;
            }
        }
    }
    // /dev: the harmless devices, the pty instance's mount point, shared memory.
    let dev = upper.join("dev");
    for (name, minor) in [
        ("null", 3),
        ("zero", 5),
        ("full", 7),
        ("random", 8),
        ("urandom", 9),
    ] {
        sys::mknod_char(&dev.join(name), 0o666, 1, minor)?;
        std::fs::set_permissions(dev.join(name), std::fs::Permissions::from_mode(0o666))?;
    }
    sys::mknod_char(&dev.join("tty"), 0o666, 5, 0)?;
    std::fs::set_permissions(dev.join("tty"), std::fs::Permissions::from_mode(0o666))?;
    mkdir(&dev.join("pts"), 0o755)?;
    mkdir(&dev.join("shm"), 0o1777)?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))?;
    }
    // Accounts and names.
    let users = spec.users();
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let host_group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let passwd = etc::passwd(&host_passwd, &users);
    let group = etc::group(&host_group, &users, &passwd);
    let shadow_gid = etc::gid_of(&group, "shadow").unwrap_or(0);
    let etc_dir = upper.join("etc");
    mkdir(&etc_dir, 0o755)?;
    // Root's; the shadow files readable by the `shadow` group only.
    for (name, text, mode, gid) in [
        ("passwd", passwd.clone(), 0o644, 0),
        ("group", group.clone(), 0o644, 0),
        ("shadow", etc::shadow(&passwd, false), 0o640, shadow_gid),
        ("gshadow", etc::shadow(&group, true), 0o640, shadow_gid),
        ("hostname", format!("{}\n", spec.hostname), 0o644, 0),
        ("hosts", etc::hosts(&spec.hostname), 0o644, 0),
    ] {
        write(&etc_dir.join(name), &text, mode, gid)?;
    }
    // Homes, then the spec's directories (which may override a home's mode).
    for u in &users {
        let home = upper_dir(upper, &u.home)?;
        mkdir(&home, if u.is_root() { 0o700 } else { 0o755 })?;
        std::os::unix::fs::chown(&home, Some(u.uid), Some(u.gid))?;
    }
    for d in &spec.dirs {
        let p = upper_dir(upper, &d.path)?;
        mkdir(&p, d.mode)?;
        std::os::unix::fs::chown(&p, Some(d.uid), Some(d.gid))?;
    }
    for m in mounts {
        if let Some(p) = mount_point(upper, m)? {
            if std::fs::symlink_metadata(&p).is_ok() {
                std::fs::remove_file(&p)?;
            }
            std::fs::write(&p, b"")?;
        }
    }
    mkdir(&upper.join(".old-root"), 0o700)?;
    Ok(group)
}

/// Fills the upper layer of a sandbox that starts from a snapshot: copies the snapshot's layer
/// (which already holds the accounts, homes, `/dev` and whiteouts), then adds what is new: the
/// hostname, whiteouts over host top-level entries that appeared since, the mount points.
/// Returns the sandbox's `/etc/group`.
///
/// A copy, not the layer as a lower directory: overlayfs refuses a lower layer inside another
/// one (`lowerdir=<layer>:/` is "overlapping lowerdir path", ELOOP), and a copy of an upper
/// layer (made with `redirect_dir`, `index` and `metacopy` off) is a valid upper layer.
fn prepare_upper_from(
    upper: &Path,
    spec: &SandboxSpec,
    mounts: &[Mount],
    layer: &Path,
) -> io::Result<()> {
    copy_tree(layer, upper)?;
    for entry in std::fs::read_dir("/")? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if SYSTEM_DIRS.contains(&name.as_ref())
            || FRESH_DIRS.iter().any(|(d, _)| *d == name)
            || std::fs::symlink_metadata(upper.join(name.as_ref())).is_ok()
        {
            continue;
        }
        sys::mknod_char(&upper.join(name.as_ref()), 0o000, 0, 0)?;
    }
    // The new sandbox's own names (replacing whatever the source had there, a whiteout too).
    let etc_dir = upper_dir(upper, "/etc")?;
    for (name, text) in [
        ("hostname", format!("{}\n", spec.hostname)),
        ("hosts", etc::hosts(&spec.hostname)),
    ] {
        let p = etc_dir.join(name);
        if std::fs::symlink_metadata(&p).is_ok() {
            std::fs::remove_file(&p)?;
        }
        write(&p, &text, 0o644, 0)?;
    }
    for m in mounts {
        if let Some(p) = mount_point(upper, m)?
            && !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
        {
            let _ = std::fs::remove_file(&p);
            std::fs::write(&p, b"")?;
        }
    }
    mkdir(&upper.join(".old-root"), 0o700)?;
    Ok(())
}

/// Copies `from` to `to` (which must not exist) keeping everything an overlay layer holds: file
/// types (whiteouts are character devices 0:0), modes, owners, times, hard links, sparse files
/// and the `trusted.overlay.*` xattrs (GNU `cp -a`, as root).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let out = std::process::Command::new("cp")
        .args(["-a", "--sparse=always", "--"])
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "copying {} failed: {}",
            from.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Namespaces {
    /// Prepares `state` (an empty directory this process created) and starts the init. Returns
    /// once the init has pivoted into the sandbox's root (blocking this thread meanwhile, about
    /// 10–30 ms; the init needs nothing from the caller's runtime).
    /// `from`: the layer of the snapshot the sandbox starts from.
    pub(crate) fn start(
        state: &Path,
        spec: &SandboxSpec,
        mounts: &[Mount],
        from: Option<&Path>,
    ) -> io::Result<Namespaces> {
        let upper = state.join("upper");
        let group_file = match from {
            None => prepare_upper(&upper, spec, mounts),
            Some(layer) => prepare_upper_from(&upper, spec, mounts, layer)
                .and_then(|()| std::fs::read_to_string(upper.join("etc/group"))),
        }
        .map_err(|e| io::Error::new(e.kind(), format!("preparing the sandbox's root: {e}")))?;
        mkdir(&state.join("work"), 0o700)?;
        mkdir(&state.join("root"), 0o755)?;
        let (lifeline_rx, lifeline_tx) = io::pipe()?;
        // pid 1 is bash as `/sbin/init` with no arguments (`exec -a`, through a link named
        // `init` so its name is `init` too): it reads its parameters and the init script from
        // the lifeline, so `ps` inside shows `/sbin/init` and nothing of the emulator's.
        let bash = state.join("init");
        std::os::unix::fs::symlink("/bin/bash", &bash)?;
        let mut script = b"set --".to_vec();
        let mut param = |p: &[u8]| {
            script.extend_from_slice(b" ");
            script.extend_from_slice(&sh_quote(p));
        };
        param(state.as_os_str().as_bytes());
        param(spec.hostname.as_bytes());
        for m in mounts {
            param(m.host.as_os_str().as_bytes());
            param(m.sandbox.as_bytes());
            param(if m.read_only { b"ro" } else { b"rw" });
        }
        let net = if spec.network { "host" } else { "none" };
        script.extend_from_slice(format!("\nnet={net}\n").as_bytes());
        script.extend_from_slice(INIT.as_bytes());
        let mut cmd = std::process::Command::new("unshare");
        cmd.args([
            "--pid",
            "--fork",
            "--kill-child",
            "--mount",
            "--uts",
            "--ipc",
            "--propagation",
            "private",
        ]);
        if !spec.network {
            cmd.arg("--net");
        }
        cmd.args(["--", "/bin/bash", "-c", "exec -a /sbin/init \"$0\""])
            .arg(&bash);
        // Its own process group: a terminal's ^C reaches the emulator, which tears down.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let cgroup = Cgroup::create();
        if let Some(cg) = &cgroup {
            freeze::join_in_child(&mut cmd, cg.procs_fd());
        }
        let mut child = cmd
            .env_clear()
            .env("PATH", PATH)
            .current_dir("/")
            .stdin(Stdio::from(lifeline_rx))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (stdout, mut stderr) = (
            child.stdout.take().expect("piped"),
            child.stderr.take().expect("piped"),
        );
        PENDING.fetch_add(1, Ordering::SeqCst);
        // The script is a few KiB, below a pipe's capacity: this never blocks.
        io::Write::write_all(&mut &lifeline_tx, &script)?;
        let ns = Namespaces {
            files: Vec::new(),
            pid_ns: 0,
            init: 0,
            group_file,
            unshare: Mutex::new(Some(child)),
            lifeline: Mutex::new(Some(lifeline_tx)),
            cgroup,
            paused: AtomicBool::new(false),
        };
        // From here on, dropping `ns` on an error tears the half-started sandbox down.
        let mut line = String::new();
        io::BufReader::new(stdout).read_line(&mut line)?;
        let Some(init) = line.strip_prefix("ready ") else {
            let mut why = String::new();
            let _ = stderr.read_to_string(&mut why);
            return Err(io::Error::other(format!(
                "the sandbox's init failed: {}",
                why.trim()
            )));
        };
        let init: i32 = init.trim().parse().map_err(io::Error::other)?;
        let mut ns = ns;
        let mut kinds = vec![
            ("ipc", libc::CLONE_NEWIPC),
            ("uts", libc::CLONE_NEWUTS),
            ("pid", libc::CLONE_NEWPID),
        ];
        if !spec.network {
            kinds.push(("net", libc::CLONE_NEWNET));
        }
        kinds.push(("mnt", libc::CLONE_NEWNS));
        for (name, kind) in kinds {
            let path = format!("/proc/{init}/ns/{name}");
            // Fail closed: a namespace equal to ours means the init is not isolated.
            if ns_inode(&path)? == ns_inode(format!("/proc/self/ns/{name}"))? {
                return Err(io::Error::other(format!(
                    "the sandbox's init shares this process's {name} namespace"
                )));
            }
            ns.files.push((File::open(path)?, kind));
        }
        ns.pid_ns = ns_inode(format!("/proc/{init}/ns/pid"))?;
        ns.init = init;
        Ok(ns)
    }

    /// Runs `f` on a fresh thread that has entered the sandbox's namespaces: `/` is the
    /// sandbox's root, and processes it starts are born in the sandbox's pid namespace.
    pub(crate) fn run<T, F>(
        self: &Arc<Self>,
        as_user: Option<sys::Creds>,
        f: F,
    ) -> tokio::sync::oneshot::Receiver<io::Result<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ns = self.clone();
        let job = move || {
            let _ = tx.send(ns.enter(as_user.as_ref()).and_then(|()| f()));
        };
        if let Err(e) = std::thread::Builder::new()
            .name("execseam-sandbox".into())
            .spawn(job)
        {
            let (tx, rx2) = tokio::sync::oneshot::channel();
            let _ = tx.send(Err(e));
            return rx2;
        }
        rx
    }

    /// Moves this (fresh, disposable) thread into the sandbox, and makes its file operations
    /// `as_user`'s if given.
    fn enter(&self, as_user: Option<&sys::Creds>) -> io::Result<()> {
        let files: Vec<(&File, libc::c_int)> = self.files.iter().map(|(f, k)| (f, *k)).collect();
        sys::enter_on_this_thread(&files)?;
        match as_user {
            Some(c) => sys::become_fs_user_on_this_thread(c),
            None => Ok(()),
        }
    }

    /// Runs `f` like [`run`](Self::run) and waits for it (blocking this thread).
    pub(crate) fn run_blocking<T, F>(
        self: &Arc<Self>,
        as_user: Option<sys::Creds>,
        f: F,
    ) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let ns = self.clone();
        std::thread::Builder::new()
            .name("execseam-sandbox".into())
            .spawn(move || ns.enter(as_user.as_ref()).and_then(|()| f()))?
            .join()
            .map_err(|_| io::Error::other("the sandbox thread panicked"))?
    }

    /// Starts `cmd` inside the sandbox as `creds`, in `workdir` (a sandbox path), which must be
    /// a directory there.
    pub(crate) async fn spawn(
        self: &Arc<Self>,
        cmd: tokio::process::Command,
        creds: sys::Creds,
        workdir: String,
    ) -> Result<tokio::process::Child, execseam_spawn::SpawnError> {
        self.spawn_with(cmd, creds, workdir, |_| Ok(()))
            .await
            .map(|(child, ())| child)
    }

    /// [`spawn`](Self::spawn), running `prepare` on the launcher thread (inside the sandbox, as
    /// root) after the workdir check and before the spawn: to open what the process needs from
    /// the sandbox's own filesystem (its pty, from the sandbox's devpts instance) and hand it to
    /// `cmd`. What `prepare` returns comes back with the child.
    pub(crate) async fn spawn_with<T, P>(
        self: &Arc<Self>,
        mut cmd: tokio::process::Command,
        creds: sys::Creds,
        workdir: String,
        prepare: P,
    ) -> Result<(tokio::process::Child, T), execseam_spawn::SpawnError>
    where
        T: Send + 'static,
        P: FnOnce(&mut tokio::process::Command) -> io::Result<T> + Send + 'static,
    {
        use execseam_spawn::SpawnError;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| SpawnError::Io(io::Error::other(e)))?;
        if self.is_paused() {
            return Err(SpawnError::Io(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "the sandbox is paused",
            )));
        }
        if let Some(cg) = &self.cgroup {
            freeze::join_in_child_tokio(&mut cmd, cg.procs_fd());
        }
        sys::drop_privileges_in_child(&mut cmd, creds);
        let rx = self.run(None, move || {
            match std::fs::metadata(&workdir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Ok(Err(format!("workdir {workdir} is not a directory"))),
                Err(e) => return Ok(Err(format!("workdir {workdir} does not exist: {e}"))),
            }
            cmd.current_dir(&workdir);
            let extra = prepare(&mut cmd)?;
            let _rt = handle.enter();
            // `cmd` (and with it whatever `prepare` gave it) is dropped on this thread.
            cmd.spawn().map(|child| Ok((child, extra)))
        });
        match rx.await {
            Ok(Ok(Ok(child))) => Ok(child),
            Ok(Ok(Err(why))) => Err(SpawnError::Workdir(why)),
            Ok(Err(e)) => Err(SpawnError::Io(e)),
            Err(_) => Err(SpawnError::Io(io::Error::other(
                "the sandbox thread panicked",
            ))),
        }
    }

    /// Host pids of the processes in the sandbox (its pid namespace), read from the host's /proc;
    /// at most `limit`.
    pub(crate) fn processes(&self, limit: usize) -> Vec<u32> {
        let mut pids = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for e in dir.flatten() {
            if pids.len() >= limit {
                break;
            }
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if self.contains(pid) {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        pids
    }

    /// Host pids of the sandbox's own processes: every process of its pid namespace (the init
    /// reads its lifeline itself, so no process there is the harness's).
    pub(crate) fn sandbox_processes(&self) -> Vec<u32> {
        self.processes(usize::MAX)
    }

    /// True while `host_pid` is a process of this sandbox.
    pub(crate) fn contains(&self, host_pid: u32) -> bool {
        ns_inode(format!("/proc/{host_pid}/ns/pid")).is_ok_and(|i| i == self.pid_ns)
    }

    /// True while paused.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Pauses every process of the sandbox (the cgroup freezer, or `SIGSTOP` to all but the
    /// init); new processes are refused until [`thaw`](Self::thaw). Idempotent.
    pub(crate) fn freeze(&self) -> io::Result<()> {
        if self.paused.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let r = match &self.cgroup {
            Some(cg) => cg.freeze(),
            None => {
                self.signal_all_but_init(libc::SIGSTOP);
                Ok(())
            }
        };
        if r.is_err() {
            self.paused.store(false, Ordering::SeqCst);
        }
        r
    }

    /// Resumes what [`freeze`](Self::freeze) paused. Idempotent.
    pub(crate) fn thaw(&self) -> io::Result<()> {
        if !self.paused.load(Ordering::SeqCst) {
            return Ok(());
        }
        match &self.cgroup {
            Some(cg) => cg.thaw()?,
            None => self.signal_all_but_init(libc::SIGCONT),
        }
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn signal_all_but_init(&self, signal: i32) {
        for pid in self.sandbox_processes() {
            if pid as i32 != self.init {
                let _ = sys::kill(pid as i32, signal);
            }
        }
    }

    /// Kills every process of the sandbox: the init dies with `unshare` (`--kill-child`), and the
    /// kernel kills the rest of its pid namespace. Idempotent; the pids are never reused before
    /// this (`unshare` is this process's unreaped child).
    pub(crate) fn kill_all(&self) {
        if let Some(child) = self.unshare.lock().expect("unshare").as_mut() {
            let _ = child.kill();
        }
        if let Some(cg) = &self.cgroup {
            cg.kill();
        } else if self.is_paused() {
            // Stopped processes die of SIGKILL too; the continue lets a stopped parent reap.
            self.signal_all_but_init(libc::SIGCONT);
        }
        self.lifeline.lock().expect("lifeline").take();
    }

    /// Kills everything and removes `state`, then, on a thread of its own, waits until the pid
    /// namespace is empty (its processes that are this process's children are reaped by tokio,
    /// and the init waits for that) and removes whatever a dying process still wrote. Blocks
    /// the caller only for the kill and the removal.
    pub(crate) fn teardown(self: Arc<Self>, state: PathBuf) {
        self.kill_all();
        if let Some(mut child) = self.unshare.lock().expect("unshare").take() {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&state);
        let spawned = std::thread::Builder::new()
            .name("execseam-teardown".into())
            .spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut pause = Duration::from_millis(1);
                while !self.processes(1).is_empty() && Instant::now() < deadline {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                if let Some(cg) = &self.cgroup {
                    cg.remove();
                }
                drop(self);
                if state.exists() {
                    let _ = std::fs::remove_dir_all(&state);
                }
                PENDING.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            PENDING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // A sandbox that never finished starting: tear down here (the teardown thread took the
        // child otherwise).
        if let Some(mut child) = self.unshare.lock().expect("unshare").take() {
            let _ = child.kill();
            let _ = child.wait();
            PENDING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Credentials of a user for [`sys::drop_privileges_in_child`], with the gids of its
/// supplementary groups as the sandbox's `/etc/group` names them.
pub(crate) fn creds(user: &User, group_file: &str) -> sys::Creds {
    let mut groups = vec![user.gid];
    for g in &user.groups {
        if let Some(gid) = etc::gid_of(group_file, g) {
            groups.push(gid);
        }
    }
    sys::Creds {
        uid: user.uid,
        gid: user.gid,
        groups,
    }
}
