//! The sandbox behind an emulator: where an emulated provider's commands really run, and what
//! its files API reads and writes.
//!
//! # What a sandbox is ([`Isolation::Namespaces`], as root)
//!
//! - **Processes.** A long-lived init (bash as `/sbin/init`, no arguments, reading
//!   [`init.sh`](./init.sh) from its lifeline; started by `unshare --pid --fork --kill-child
//!   --mount --uts --ipc`) is pid 1 of the sandbox's own pid namespace: `ps` inside shows
//!   `/sbin/init` and nothing of the emulator's. It reaps orphans (daemonised children of commands), so `ps -e` inside lists the
//!   sandbox's processes only. [`Sandbox::destroy`] kills `unshare`, the init dies with it, and the
//!   kernel kills every other process of the namespace: background children and daemons too. The
//!   init also reads a lifeline pipe whose write end only this process holds: if the emulator
//!   dies, even by SIGKILL, the init ends and takes the sandbox with it.
//! - **Filesystem.** The root is an overlay whose lower layer is the host's `/` (read-only from
//!   the sandbox: writes are copied up) and whose upper layer is the sandbox's own directory
//!   (`<state>/upper`, on the host's disk, removed on destroy). Writes anywhere (`/var/tmp`,
//!   `/etc`, `/usr/local`) stay in the sandbox. The system directories (`/usr`, `/etc`, `/var`,
//!   `/opt`, …) show through; `/home`, `/root`, `/tmp`, `/var/tmp`, `/run`, `/mnt`, `/media`,
//!   `/srv` start empty (opaque directories in the upper layer) and every other top-level entry
//!   (the checkout under `/work`, `/data`, …) is hidden by a whiteout, as are this process's
//!   working directory and `$HOME`; a host path is visible only when bound in on purpose
//!   ([`Mount`], `--mount HOST:SANDBOX[:ro]`). `/proc` is the sandbox's own (with `/proc/sys`
//!   read-only and `/proc/sysrq-trigger` masked), `/sys` a read-only sysfs, `/dev` a handful of
//!   harmless nodes (`null zero full random urandom tty`), a private `devpts` instance (so a
//!   sandbox can host PTYs) and `/dev/shm`. The host's mount namespace is never touched: every
//!   mount happens inside the new one, whose propagation is private.
//! - **Host name** from the UTS namespace ([`SandboxSpec::hostname`]); **IPC** objects private.
//! - **Users.** The sandbox has its own `/etc/passwd`, `group` and (hash-free) `shadow` with the
//!   provider's accounts ([`User`], [`etc`]); commands run with the user's uid, gid and
//!   supplementary groups, and every process's capability bounding set is cut to Docker's default
//!   set less `CAP_MKNOD` ([`sys`](crate::sys)): root inside a sandbox cannot mount,
//!   change the host's clock or network, or open files by handle.
//! - **Network** is the host's (real sandboxes reach the network; the emulators' clients reach the
//!   sandbox's servers on loopback), unless [`SandboxSpec::without_network`]: then a network
//!   namespace of its own with loopback only (no route anywhere else).
//!
//! It is **not a VM**: commands run on this machine's kernel.
//!
//! # The fast launcher
//!
//! A command does not rebuild namespaces. A short-lived thread of this process calls
//! `unshare(CLONE_FS)` and `setns` into the init's namespaces (only that thread moves: the rest
//! of the process keeps the host's view), checks the workdir there, and spawns the process, which
//! is born in the sandbox's pid namespace with `/` the sandbox's root; privileges are dropped in
//! the child just before `exec`. The process is an ordinary child of this process, so
//! [`execseam_spawn::ProcessExec`]'s pipes, process group (it leads its own, visible inside),
//! kill-on-drop and exit status work unchanged. This costs a thread and four `setns` calls per
//! command, instead of `unshare` + `/bin/sh` + one `mount` per bind (10–13 ms). The same thread
//! mechanism serves the files API ([`Sandbox::fs`]): file operations resolve paths, symlinks
//! included, inside the sandbox, so a symlink planted by a command cannot make the emulator
//! (root) write a host file.
//!
//! Alternatives not taken: `nsenter` per command (an extra `exec` and a process between the
//! emulator and the command, so no real process group inside and no in-sandbox pid without a
//! race); a fork server inside the sandbox (passing stdio needs `SCM_RIGHTS`, so an extra binary
//! to ship); a fresh mount namespace per command (today's cost).
//!
//! # Without root ([`Isolation::Translate`])
//!
//! When this process cannot create namespaces (not root, or no `unshare`), or when
//! `EXECSEAM_EMULATOR_ISOLATION=translate` asks for it, the emulator runs in a **degraded mode**
//! and says so on every start: commands run directly on the host as this process's user, with no
//! pid, filesystem or user isolation; each sandbox gets a private temporary root whose
//! directories replace the provider's paths (`/home/user` becomes `<root>/home/user`), which the
//! commands see as such (the documented degradation).
//!
//! # Terminals
//!
//! [`Sandbox::spawn_pty`] starts a process on a real pseudo-terminal of the sandbox: the pair is
//! opened on the launcher thread from the sandbox's own `devpts` instance (so the process sees
//! `/dev/pts/0`, … of its sandbox, never the host's), the slave is the user's and becomes the
//! controlling terminal of a new session the process leads (`setsid`, `TIOCSCTTY`), and the
//! emulator keeps the master ([`PtyMaster`]: async read and write, resize with `TIOCSWINSZ`).
//! `test -t 0`, `stty size`, `^C` and SIGWINCH behave as on a login terminal.
//!
//! # Pause, snapshots, forks, ports
//!
//! - **Pause** ([`Sandbox::pause`]) freezes every process of the sandbox with the cgroup v2
//!   freezer (each process joins the sandbox's group at birth; `SIGSTOP`/`SIGCONT` where no
//!   writable cgroup v2 hierarchy exists): memory and processes are kept, and a resumed process
//!   continues where it was. While paused, new commands are refused at once (never a hang).
//! - **Snapshot** ([`Sandbox::snapshot`]) is a copy of the overlay's upper layer (everything the
//!   sandbox wrote, whiteouts included) taken while the sandbox is frozen and the files API
//!   waits: one point in time. It is filesystem only: processes cannot follow without a memory
//!   checkpoint (CRIU does not work on this kernel), so an emulator whose provider keeps memory
//!   in snapshots must say so rather than hand back a filesystem copy as a full one.
//! - **Create from a snapshot** ([`Sandbox::create_from`]) starts a new sandbox whose upper
//!   layer is a copy of the snapshot's: a **fork** (snapshot, then create from it) shares
//!   nothing with its source, and a snapshot outlives the sandbox it was taken of. (A copy, not
//!   the snapshot as a lower layer: overlayfs refuses a lower layer that lies inside another,
//!   and the host's `/` holds every directory here. Cost: O(what the sandbox wrote), about
//!   0.1 s per 100 MB page-cached.)
//! - **Restore in place** ([`Sandbox::restore`]): the sandbox's processes end and its init
//!   starts again over a copy of the snapshot's layer (same id, spec and mounts): the whole
//!   writable filesystem is the snapshot's again, deletions and new files undone. The overlay's
//!   upper layer is never changed under a mounted overlay (undefined behaviour in overlayfs):
//!   the old init keeps its layer until it is torn down.
//! - **Directory images** ([`Sandbox::snapshot_dir`], [`Sandbox::mount_dir`]): a copy of one
//!   directory, taken while the sandbox is frozen, and a copy of it mounted (a tmpfs in the
//!   sandbox's mount namespace) over a path of any sandbox, independent of both; see [`DirImage`].
//! - **Ports** ([`ports`](crate::ports)): the network is the host's, so a server on port P of
//!   a sandbox is `127.0.0.1:P`; the emulators route their provider's URL scheme (with a
//!   `*.localhost` host) to it after checking that the listener belongs to that sandbox and the
//!   sandbox is not paused.

mod dir_image;
mod etc;
mod freeze;
mod ns;
mod pty;
pub mod spec;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use execseam_spawn::{ProcessConfig, ProcessExec, SpawnError, Spawner};
use tokio::task::AbortHandle;

/// The provider name the sandboxes' runners give their errors (as the local adapter's did:
/// emulators map them to their own wire).
const PROVIDER: &str = "local";

pub use dir_image::DirImage;
pub use freeze::describe as describe_pause;
pub use pty::{PtyChild, PtyMaster, PtySize};
pub use spec::{Dir, Mount, SandboxSpec, Sandboxing, User};

/// How sandboxes are isolated on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Real sandboxes: pid, mount (overlay root), UTS and IPC namespaces, the provider's users
    /// (needs root and util-linux's `unshare`).
    Namespaces,
    /// Degraded: commands run on the host as this process's user, with provider paths rewritten
    /// to host paths under the sandbox's root.
    Translate,
}

impl Isolation {
    /// `Namespaces` if this process can create the sandboxes' namespaces, else `Translate`
    /// (also when `EXECSEAM_EMULATOR_ISOLATION=translate`). Probed once per process.
    pub fn detect() -> Isolation {
        static DETECTED: OnceLock<Isolation> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            if std::env::var("EXECSEAM_EMULATOR_ISOLATION").as_deref() == Ok("translate") {
                return Isolation::Translate;
            }
            let ok = crate::sys::euid() == 0
                && std::process::Command::new("unshare")
                    .args([
                        "--pid",
                        "--fork",
                        "--mount",
                        "--uts",
                        "--ipc",
                        "--propagation",
                        "private",
                        "--",
                        "true",
                    ])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
            if ok {
                Isolation::Namespaces
            } else {
                tracing::warn!("{}", Isolation::Translate.describe());
                Isolation::Translate
            }
        })
    }

    /// A short line for conformance records (`Target::environment`): which mode ran.
    pub fn record_line(self) -> &'static str {
        match self {
            Isolation::Namespaces => {
                "emulated sandboxes with namespaces (own pid, mount, UTS, IPC; overlay root; the provider's users)"
            }
            Isolation::Translate => {
                "emulated sandboxes DEGRADED (no root: commands on the host, provider paths translated)"
            }
        }
    }

    /// One line for banners and records: what isolation is in force.
    pub fn describe(self) -> &'static str {
        match self {
            Isolation::Namespaces => {
                "isolation: namespaces (own pid, mount, UTS and IPC namespaces; overlay root over \
                 the host's /, host homes and checkout hidden; the provider's users); commands run \
                 on this machine's kernel, not in a VM; network is the host's"
            }
            Isolation::Translate => {
                "isolation: DEGRADED (not root, or no unshare): commands run directly on this host \
                 as this user, with no pid, filesystem or user isolation; provider paths are \
                 translated to per-sandbox host directories"
            }
        }
    }
}

/// How [`Isolation::Translate`] maps sandbox paths to host paths: the private directories to
/// the sandbox's root, the [`Mount`]s to their host paths.
#[derive(Debug)]
struct Translation {
    root: PathBuf,
    private: Vec<String>,
    mounts: Vec<Mount>,
}

impl Translation {
    fn map(&self, sandbox_path: &str) -> String {
        for m in &self.mounts {
            if let Some(rest) = strip_dir(sandbox_path, &m.sandbox) {
                return join(&m.host, rest);
            }
        }
        for p in &self.private {
            if let Some(rest) = strip_dir(sandbox_path, p) {
                return join(&self.root.join(p.trim_start_matches('/')), rest);
            }
        }
        sandbox_path.to_owned()
    }
}

/// What [`Sandbox::fs`] closures get: how to name a sandbox path.
#[derive(Clone, Debug)]
pub struct Fs {
    /// `Translate` only.
    translate: Option<Arc<Translation>>,
}

impl Fs {
    /// The path to use for a sandbox path in the closure's std::fs calls: the path itself in
    /// [`Isolation::Namespaces`] (the closure runs inside the sandbox), the host path in
    /// [`Isolation::Translate`].
    pub fn path(&self, sandbox_path: &str) -> PathBuf {
        match &self.translate {
            None => PathBuf::from(sandbox_path),
            Some(t) => PathBuf::from(t.map(sandbox_path)),
        }
    }

    /// Gives a file to `user`, as a provider's daemon (running as root) does for files its API
    /// creates. A no-op in [`Isolation::Translate`] (this process is not root there).
    pub fn chown(&self, sandbox_path: &str, user: &User) -> io::Result<()> {
        match self.translate {
            None => std::os::unix::fs::lchown(sandbox_path, Some(user.uid), Some(user.gid)),
            Some(_) => Ok(()),
        }
    }

    /// Creates a FIFO (named pipe) at a path from [`path`](Self::path).
    pub fn mkfifo(&self, path: &Path, mode: u32) -> io::Result<()> {
        crate::sys::mkfifo(path, mode)
    }

    /// Creates `sandbox_path` and its missing parents, giving each directory it creates to
    /// `user` (as a daemon running as the user would create them).
    pub fn create_dir_all_as(&self, sandbox_path: &str, user: &User) -> io::Result<()> {
        let target = self.path(sandbox_path);
        crate::util::create_missing_dirs(
            &target,
            |p| std::fs::symlink_metadata(p).is_err(),
            |dir| match self.is_isolated() {
                true => std::os::unix::fs::lchown(dir, Some(user.uid), Some(user.gid)),
                false => Ok(()),
            },
        )
    }

    /// True in [`Isolation::Namespaces`]: ownership and permission bits are real.
    pub fn is_isolated(&self) -> bool {
        self.translate.is_none()
    }
}

/// One sandbox: its filesystem, its processes, a command runner for its default user.
pub struct Sandbox {
    id: String,
    spec: SandboxSpec,
    isolation: Isolation,
    /// `Namespaces`: the state directory (`upper`, `work`, `root`); `Translate`: the root whose
    /// subdirectories stand for the private paths.
    state: PathBuf,
    ns: Option<Slot>,
    translation: Arc<Translation>,
    exec: ProcessExec,
    running: Mutex<Vec<AbortHandle>>,
    alive: AtomicBool,
    /// Held for reading by every files-API operation, for writing by a snapshot's copy.
    gate: Arc<RwLock<()>>,
    /// The group [`Sandbox::spawn_in_daemon_group`] puts processes in, once one was asked for.
    daemon_group: Mutex<Option<DaemonGroup>>,
}

/// What the [`DaemonGroup`]'s leader shows as its name in the sandbox's `ps` (E2B's envd).
pub const DAEMON_GROUP_LEADER: &str = "/usr/bin/envd";

/// A process group standing for a provider daemon's own: led by a placeholder process inside the
/// sandbox (root, `sleep infinity` named [`DAEMON_GROUP_LEADER`]), never this process's group, so a group kill sent from a
/// command (`kill 0`) reaches the daemon's children and the placeholder, never the emulator or
/// the test harness. The leader is never reaped while kept, so the group outlives its death.
struct DaemonGroup {
    /// The namespaces it lives in: a restore starts new ones, and with them a new group.
    ns: Option<std::sync::Weak<ns::Namespaces>>,
    /// Killed (and then reaped) when dropped.
    _leader: tokio::process::Child,
    /// The group's id as the sandbox's processes name it (their pid namespace's).
    pgid: u32,
}

/// The namespaces of a sandbox in [`Isolation::Namespaces`], shared with its command runners:
/// [`Sandbox::restore`] replaces them whole (a new init over the restored layer), so each use
/// takes the current ones.
#[derive(Clone)]
struct Slot(Arc<RwLock<Arc<ns::Namespaces>>>);

impl Slot {
    fn get(&self) -> Arc<ns::Namespaces> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A snapshot of a sandbox's filesystem: a copy of its overlay's upper layer, removed from the
/// disk when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Snapshot(Arc<Layer>);

#[derive(Debug)]
struct Layer {
    dir: PathBuf,
    size: u64,
}

impl Drop for Layer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Snapshot {
    /// Bytes of the regular files the snapshot holds (what the sandbox wrote).
    pub fn size_bytes(&self) -> u64 {
        self.0.size
    }
}

crate::debug_fields!(Sandbox: id, state, isolation);

/// Starts a [`ProcessExec`]'s processes inside a sandbox as one user.
struct SandboxSpawner {
    ns: Slot,
    creds: crate::sys::Creds,
    home: String,
}

impl Spawner for SandboxSpawner {
    fn spawn(
        &self,
        command: tokio::process::Command,
        workdir: Option<String>,
    ) -> execseam_core::BoxFuture<'static, Result<tokio::process::Child, SpawnError>> {
        let ns = self.ns.get();
        let creds = self.creds.clone();
        let workdir = workdir.unwrap_or_else(|| self.home.clone());
        Box::pin(async move { ns.spawn(command, creds, workdir).await })
    }
}

/// A process started with [`Sandbox::spawn`] or [`Sandbox::spawn_in_daemon_group`].
#[derive(Debug)]
pub struct SandboxChild {
    /// The process (a child of this process; it leads its own process group unless started in
    /// the daemon group).
    pub child: tokio::process::Child,
    /// Its pid on the host (and, from [`Sandbox::spawn`], its process group there).
    pub host_pid: u32,
    /// Its pid inside the sandbox (what `echo $$` prints there); the host pid in `Translate`.
    pub pid: u32,
}

impl Sandbox {
    /// Creates a sandbox: a fresh state directory under [`Sandboxing::state_dir`] (or the system
    /// temp dir) and, in [`Isolation::Namespaces`], its init (blocking about 10–30 ms).
    pub fn create(
        id: impl Into<String>,
        spec: SandboxSpec,
        sandboxing: &Sandboxing,
    ) -> io::Result<Arc<Sandbox>> {
        Self::create_over(id.into(), spec, sandboxing, None)
    }

    /// Creates a sandbox whose filesystem starts as `snapshot` left it (see the
    /// [module docs](self)); its processes start fresh. `Unsupported` in
    /// [`Isolation::Translate`].
    pub fn create_from(
        id: impl Into<String>,
        spec: SandboxSpec,
        sandboxing: &Sandboxing,
        snapshot: &Snapshot,
    ) -> io::Result<Arc<Sandbox>> {
        if sandboxing.isolation != Isolation::Namespaces {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "snapshots need isolated sandboxes (root)",
            ));
        }
        Self::create_over(id.into(), spec, sandboxing, Some(&snapshot.0.dir))
    }

    fn create_over(
        id: String,
        spec: SandboxSpec,
        sandboxing: &Sandboxing,
        from: Option<&Path>,
    ) -> io::Result<Arc<Sandbox>> {
        let base = match &sandboxing.state_dir {
            Some(d) => d.clone(),
            None => std::env::temp_dir(),
        }
        .canonicalize()?;
        let state = base.join(format!(
            "execseam-{}-{}",
            spec.name,
            crate::clock::hex_id(16)
        ));
        std::fs::create_dir(&state)?;
        std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let translation = Arc::new(Translation {
            root: state.clone(),
            private: spec.private_paths(),
            mounts: sandboxing.mounts.clone(),
        });
        let isolation = sandboxing.isolation;
        let (ns, exec) = match isolation {
            Isolation::Namespaces => {
                let started = ns::Namespaces::start(&state, &spec, &sandboxing.mounts, from);
                let ns = match started {
                    Ok(ns) => Slot(Arc::new(RwLock::new(Arc::new(ns)))),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&state);
                        return Err(e);
                    }
                };
                let exec = Self::exec_in(&ns, &spec, &spec.user);
                (Some(ns), exec)
            }
            Isolation::Translate if !spec.network => {
                let _ = std::fs::remove_dir_all(&state);
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a sandbox without network needs namespace isolation (root and unshare)",
                ));
            }
            Isolation::Translate => {
                for p in &translation.private {
                    std::fs::create_dir_all(state.join(p.trim_start_matches('/')))?;
                }
                (None, Self::exec_translated(&translation, &spec, &spec.user))
            }
        };
        let sandbox = Arc::new(Sandbox {
            id,
            spec,
            isolation,
            state,
            ns,
            translation,
            exec,
            running: Mutex::new(Vec::new()),
            alive: AtomicBool::new(true),
            gate: Arc::new(RwLock::new(())),
            daemon_group: Mutex::new(None),
        });
        let mut live = LIVE.lock().expect("live sandboxes");
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&sandbox));
        Ok(sandbox)
    }

    fn exec_translated(t: &Translation, spec: &SandboxSpec, user: &User) -> ProcessExec {
        let mut env = user_env(spec, user);
        for v in env.values_mut() {
            *v = t.map(v);
        }
        ProcessExec::new(
            ProcessConfig::new().inherit(["PATH"]).base_env(env),
            PROVIDER,
        )
    }

    fn exec_in(ns: &Slot, spec: &SandboxSpec, user: &User) -> ProcessExec {
        let spawner = SandboxSpawner {
            ns: ns.clone(),
            creds: ns::creds(user, &ns.get().group_file),
            home: user.home.clone(),
        };
        ProcessExec::new(
            ProcessConfig::new()
                .inherit(std::iter::empty::<String>())
                .base_env(user_env(spec, user))
                .spawner(Arc::new(spawner)),
            PROVIDER,
        )
    }

    /// The sandbox's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the sandbox looks like from inside.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// The user commands run as by default.
    pub fn user(&self) -> &User {
        &self.spec.user
    }

    /// The sandbox's state directory on the host.
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The overlay's upper layer on the host: everything the sandbox wrote (whiteouts mark what
    /// it deleted). `None` in [`Isolation::Translate`].
    pub fn upper_dir(&self) -> Option<PathBuf> {
        self.ns.as_ref().map(|_| self.state.join("upper"))
    }

    /// The isolation in use.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The runner for commands as the default user (they see the provider's paths).
    pub fn exec(&self) -> &ProcessExec {
        &self.exec
    }

    /// A runner for commands as `user` (an account of the sandbox), with the user's HOME, USER
    /// and LOGNAME over the provider's environment. In [`Isolation::Translate`] commands run as
    /// this process's user whatever `user` is.
    pub fn exec_as(&self, user: &User) -> ProcessExec {
        match &self.ns {
            Some(slot) => Self::exec_in(slot, &self.spec, user),
            None => Self::exec_translated(&self.translation, &self.spec, user),
        }
    }

    /// The provider's environment for `user`, as [`exec_as`](Self::exec_as) gives it to
    /// commands: the spec's variables, then the user's HOME, USER and LOGNAME (unless the spec
    /// sets them for the default user). For processes started with [`spawn`](Self::spawn) or
    /// [`spawn_pty`](Self::spawn_pty), which take the caller's environment.
    pub fn env_of(&self, user: &User) -> BTreeMap<String, String> {
        user_env(&self.spec, user)
    }

    /// Starts `command` in the sandbox as `user` in `workdir` (a sandbox path that must be a
    /// directory there): for emulators that drive processes themselves (interactive stdin,
    /// signals, PTYs). The caller sets the program, arguments, environment and stdio; the harness
    /// adds the namespaces, the user, the bounding set and a process group of its own. In
    /// [`Isolation::Translate`] it runs on the host, with `workdir` translated.
    pub async fn spawn(
        &self,
        command: tokio::process::Command,
        user: &User,
        workdir: &str,
    ) -> Result<SandboxChild, SpawnError> {
        self.spawn_grouped(command, user, workdir, 0).await
    }

    /// [`spawn`](Self::spawn) as a provider daemon that gives its children no group of their own
    /// (E2B's envd starts a non-PTY process with neither `Setpgid` nor `Setsid`): the process
    /// joins one group per sandbox standing for the daemon's, shared by every process started
    /// this way and led by a placeholder inside the sandbox, never the emulator's group (see
    /// [`DaemonGroup`]). So `kill -- -$pid` of such a process reaches no group, and its group's
    /// id is not its pid, as on the provider.
    pub async fn spawn_in_daemon_group(
        &self,
        command: tokio::process::Command,
        user: &User,
        workdir: &str,
    ) -> Result<SandboxChild, SpawnError> {
        let pgid = self.daemon_group().await?;
        self.spawn_grouped(command, user, workdir, pgid).await
    }

    /// The id of the sandbox's [`DaemonGroup`], started on first use (and again after a
    /// restore replaced the namespaces it lived in).
    async fn daemon_group(&self) -> Result<u32, SpawnError> {
        let current = self.ns().map(|ns| Arc::downgrade(&ns));
        let same = |g: &&DaemonGroup| match (&g.ns, &current) {
            (Some(a), Some(b)) => a.ptr_eq(b),
            (a, b) => a.is_none() && b.is_none(),
        };
        let lock = || self.daemon_group.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = lock().as_ref().filter(same) {
            return Ok(g.pgid);
        }
        // Named as E2B's daemon shows in `ps` (e2b-dev/infra `storage.GuestEnvdPath`,
        // `/usr/bin/envd`, run by systemd's `envd.service`): a sandbox's own view has no
        // process that is not the provider's.
        let mut leader = tokio::process::Command::new("sleep");
        leader
            .arg0(DAEMON_GROUP_LEADER)
            .arg("infinity")
            .env_clear()
            .env("PATH", ns::PATH)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let leader = self.spawn_grouped(leader, &User::root(), "/", 0).await?;
        let mut slot = lock();
        if let Some(g) = slot.as_ref().filter(same) {
            return Ok(g.pgid); // started meanwhile by another spawn: ours is dropped (killed)
        }
        *slot = Some(DaemonGroup {
            ns: current,
            _leader: leader.child,
            pgid: leader.pid,
        });
        Ok(leader.pid)
    }

    /// Spawns into process group `pgid` (0: a group of its own; else a group id as the
    /// sandbox's processes see it).
    async fn spawn_grouped(
        &self,
        mut command: tokio::process::Command,
        user: &User,
        workdir: &str,
        pgid: u32,
    ) -> Result<SandboxChild, SpawnError> {
        command.process_group(pgid as i32);
        execseam_spawn::restore_default_signals(&mut command);
        let child = match self.ns() {
            Some(ns) => {
                ns.spawn(command, ns::creds(user, &ns.group_file), workdir.to_owned())
                    .await?
            }
            None => {
                self.host_workdir(&mut command, workdir)?;
                command.spawn().map_err(SpawnError::Io)?
            }
        };
        let (host_pid, pid) = self.pids(&child)?;
        Ok(SandboxChild {
            child,
            host_pid,
            pid,
        })
    }

    /// Without namespaces: runs `command` in the host directory of `workdir`, which must exist.
    fn host_workdir(
        &self,
        command: &mut tokio::process::Command,
        workdir: &str,
    ) -> Result<(), SpawnError> {
        let dir = self.visible_path(workdir);
        if !Path::new(&dir).is_dir() {
            return Err(SpawnError::Workdir(format!(
                "workdir {workdir} does not exist"
            )));
        }
        command.current_dir(dir);
        Ok(())
    }

    /// A spawned child's pid on the host and in the sandbox.
    fn pids(&self, child: &tokio::process::Child) -> Result<(u32, u32), SpawnError> {
        let host_pid = child
            .id()
            .ok_or_else(|| SpawnError::Io(io::Error::other("the process has no pid")))?;
        let pid = match self.ns {
            Some(_) => sandbox_pid(host_pid).unwrap_or(host_pid),
            None => host_pid,
        };
        Ok((host_pid, pid))
    }

    /// Runs `f` where sandbox paths resolve as the sandbox's commands see them (on a thread inside
    /// the sandbox in [`Isolation::Namespaces`]; name paths through [`Fs::path`]), as root: for a
    /// provider daemon that runs as root (E2B's envd, Cloudflare's bridge) and gives files away
    /// itself ([`Fs::chown`]). Every emulator's files API goes through here or [`fs_as`](Self::fs_as).
    pub async fn fs<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        self.fs_with(None, f).await
    }

    /// [`fs`](Self::fs) with the file permissions and ownership of `user` (for a provider daemon
    /// that runs as the sandbox's user, as Daytona's and Sprites' do): permission checks are the
    /// user's and new files are the user's. As this process's user in [`Isolation::Translate`].
    pub async fn fs_as<T, F>(&self, user: &User, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        self.fs_with(Some(user), f).await
    }

    async fn fs_with<T, F>(&self, user: Option<&User>, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        match self.fs_job(user, f) {
            (Some((ns, creds)), job) => ns
                .run(creds, job)
                .await
                .map_err(|_| io::Error::other("the sandbox thread panicked"))?,
            (None, job) => job(),
        }
    }

    /// [`fs`](Self::fs), blocking the calling thread until `f` is done (for synchronous code).
    pub fn fs_blocking<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        self.fs_blocking_with(None, f)
    }

    /// [`fs_as`](Self::fs_as), blocking the calling thread until `f` is done.
    pub fn fs_blocking_as<T, F>(&self, user: &User, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        self.fs_blocking_with(Some(user), f)
    }

    fn fs_blocking_with<T, F>(&self, user: Option<&User>, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        match self.fs_job(user, f) {
            (Some((ns, creds)), job) => ns.run_blocking(creds, job),
            (None, job) => job(),
        }
    }

    /// `f` on this sandbox's view, run behind its gate, and where to run it: the sandbox's
    /// namespaces with `user`'s file credentials (or root's), or here (`None`).
    #[allow(clippy::type_complexity)]
    fn fs_job<T, F>(
        &self,
        user: Option<&User>,
        f: F,
    ) -> (
        Option<(Arc<ns::Namespaces>, Option<crate::sys::Creds>)>,
        impl FnOnce() -> io::Result<T> + Send + 'static,
    )
    where
        T: Send + 'static,
        F: FnOnce(&Fs) -> io::Result<T> + Send + 'static,
    {
        let fs = self.fs_view();
        let gate = self.gate.clone();
        let job = move || {
            let _open = gate.read().unwrap_or_else(|p| p.into_inner());
            f(&fs)
        };
        let ns = self.ns().map(|ns| {
            let creds = user.map(|u| ns::creds(u, &ns.group_file));
            (ns, creds)
        });
        (ns, job)
    }

    fn fs_view(&self) -> Fs {
        Fs {
            translate: match self.ns {
                Some(_) => None,
                None => Some(self.translation.clone()),
            },
        }
    }

    /// For tests and inspection only: where a sandbox path can be reached from the host
    /// (`/proc/<init>/root/…`; the translated path in [`Isolation::Translate`]). Unlike
    /// [`fs`](Self::fs), an absolute symlink met on the way resolves against the host's root, so
    /// emulator code never uses it (a test checks).
    #[doc(hidden)]
    pub fn host_path(&self, sandbox_path: &str) -> PathBuf {
        match self.ns() {
            Some(ns) => PathBuf::from(format!(
                "/proc/{}/root/{}",
                ns.init,
                sandbox_path.trim_start_matches('/')
            )),
            None => PathBuf::from(self.translation.map(sandbox_path)),
        }
    }

    /// True until [`destroy`](Self::destroy).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The path as the sandbox's commands see it: with [`Isolation::Translate`] a provider path
    /// (`/home/user/x`) becomes the host path under the root (or the host path of a [`Mount`]);
    /// otherwise it is unchanged.
    pub fn visible_path(&self, sandbox_path: &str) -> String {
        match self.isolation {
            Isolation::Namespaces => sandbox_path.to_owned(),
            Isolation::Translate => self.translation.map(sandbox_path),
        }
    }

    /// Host pids of the sandbox's processes (`None` in [`Isolation::Translate`], which has no
    /// pid namespace to tell them by).
    pub fn processes(&self) -> Option<Vec<u32>> {
        self.ns().map(|ns| ns.sandbox_processes())
    }

    /// `(pid inside the sandbox, host pid)` of every live process of the sandbox, by pid (empty
    /// in [`Isolation::Translate`]; for a provider's process listing, `ps`).
    pub fn process_table(&self) -> Vec<(u32, u32)> {
        let mut t: Vec<(u32, u32)> = self
            .processes()
            .unwrap_or_default()
            .into_iter()
            .filter(|&h| !is_zombie(h))
            .filter_map(|h| Some((sandbox_pid(h)?, h)))
            .collect();
        t.sort_unstable();
        t
    }

    /// The host pid of the live process whose pid inside the sandbox is `pid` (in
    /// [`Isolation::Translate`] they are the same).
    pub fn host_pid(&self, pid: u32) -> Option<u32> {
        match self.ns() {
            Some(ns) => ns
                .sandbox_processes()
                .into_iter()
                .find(|&h| sandbox_pid(h) == Some(pid)),
            None => Path::new(&format!("/proc/{pid}")).exists().then_some(pid),
        }
    }

    /// Sends `signal` to the process group led by `host_pid` if that process is still in this
    /// sandbox (so a reaped and reused pid is never signalled).
    pub fn signal_group(&self, host_pid: u32, signal: i32) -> io::Result<()> {
        if let Some(ns) = self.ns()
            && !ns.contains(host_pid)
        {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        crate::sys::kill(-(host_pid as i32), signal)
    }

    /// Registers a running command's task, so that [`destroy`](Self::destroy) aborts it.
    pub fn track(&self, handle: AbortHandle) {
        let mut running = self.running.lock().expect("running");
        running.retain(|h| !h.is_finished());
        running.push(handle);
    }

    /// Kills every process of the sandbox but its init, and aborts its running commands; the
    /// sandbox and its files stay (a provider's "stop"). With [`Isolation::Translate`] only the
    /// tracked commands end.
    pub fn kill_processes(&self) {
        for h in self.running.lock().expect("running").drain(..) {
            h.abort(); // dropping the exec future kills the process group
        }
        // An aborted exec may be mid-poll on another worker and spawn after one scan, so
        // the scan repeats until only the init (and zombies it has yet to reap) is left;
        // bounded, so a process that cannot die does not hang the caller.
        let Some(ns) = self.ns() else { return };
        for _ in 0..200 {
            let live: Vec<u32> = ns
                .sandbox_processes()
                .into_iter()
                .filter(|&pid| sandbox_pid(pid) != Some(1) && !is_zombie(pid))
                .collect();
            if live.is_empty() {
                return;
            }
            for pid in live {
                let _ = crate::sys::kill(pid as i32, libc::SIGKILL);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        tracing::warn!("processes of a stopped sandbox survived 200 SIGKILL rounds");
    }

    /// Pauses the sandbox: every process frozen where it is (memory kept), new commands refused
    /// until [`resume`](Self::resume) (their spawn fails at once). Idempotent. `Unsupported` in
    /// [`Isolation::Translate`]. Blocks up to 5 s (freezing waits for tasks to leave the kernel).
    pub fn pause(&self) -> io::Result<()> {
        self.namespaces("pause")?.freeze()
    }

    /// Resumes a paused sandbox: its processes continue where they were. Idempotent.
    pub fn resume(&self) -> io::Result<()> {
        self.namespaces("resume")?.thaw()
    }

    /// True while paused.
    pub fn is_paused(&self) -> bool {
        self.ns().is_some_and(|ns| ns.is_paused())
    }

    /// The current namespaces (`None` in [`Isolation::Translate`]).
    fn ns(&self) -> Option<Arc<ns::Namespaces>> {
        self.ns.as_ref().map(Slot::get)
    }

    fn namespaces(&self, what: &str) -> io::Result<Arc<ns::Namespaces>> {
        self.ns().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{what} needs isolated sandboxes (root)"),
            )
        })
    }

    /// Takes a snapshot of the sandbox's filesystem (see the [module docs](self)): the sandbox is
    /// frozen (unless paused already) and the files API waits while its upper layer is copied,
    /// then it runs on. Blocking: call it from a blocking thread. The layer is written beside the
    /// sandboxes' state directories.
    pub fn snapshot(&self) -> io::Result<Snapshot> {
        let ns = self.namespaces("snapshot")?;
        let base = self.state.parent().unwrap_or(Path::new("/tmp"));
        let dir = base.join(format!("execseam-snapshot-{}", crate::clock::hex_id(16)));
        let _quiet = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let was_paused = ns.is_paused();
        if !was_paused {
            ns.freeze()?;
        }
        let copied = ns::copy_tree(&self.state.join("upper"), &dir);
        if !was_paused {
            ns.thaw()?;
        }
        let layer = Layer {
            size: dir_size(&dir),
            dir,
        };
        copied?;
        Ok(Snapshot(Arc::new(layer)))
    }

    /// Restores the sandbox's filesystem in place to `snapshot` (see the [module docs](self)):
    /// every process ends, the init with them, and the sandbox starts again over a copy of the
    /// snapshot's layer, as [`create_from`](Self::create_from) would, keeping its id, spec and
    /// mounts; the files API waits meanwhile. A failed start leaves the sandbox as it was.
    /// Blocking: call it from a blocking thread. `Unsupported` in [`Isolation::Translate`].
    pub fn restore(&self, snapshot: &Snapshot) -> io::Result<()> {
        let slot = self.ns.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "restore needs isolated sandboxes (root)",
            )
        })?;
        let _quiet = self.gate.write().unwrap_or_else(|p| p.into_inner());
        for h in self.running.lock().expect("running").drain(..) {
            h.abort(); // dropping the exec future kills the process group
        }
        let mut current = slot.0.write().unwrap_or_else(|p| p.into_inner());
        // The running init keeps its overlay (mounts hold directories, not names): its files
        // move aside, the new init starts over a fresh copy, and the old one is torn down.
        let aside = self
            .state
            .join(format!("replaced-{}", crate::clock::hex_id(8)));
        std::fs::create_dir(&aside)?;
        let parts = ["upper", "work", "root", "init"];
        let moved: Vec<&str> = parts
            .into_iter()
            .take_while(|p| std::fs::rename(self.state.join(p), aside.join(p)).is_ok())
            .collect();
        let started = if moved.len() == parts.len() {
            ns::Namespaces::start(
                &self.state,
                &self.spec,
                &self.translation.mounts,
                Some(&snapshot.0.dir),
            )
        } else {
            Err(io::Error::other("moving the sandbox's layer aside failed"))
        };
        match started {
            Ok(new) => {
                // The daemon group's leader died with the old processes: reaped, not waited for.
                self.daemon_group
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                std::mem::replace(&mut *current, Arc::new(new)).teardown(aside);
                Ok(())
            }
            Err(e) => {
                for p in moved {
                    let at = self.state.join(p);
                    let _ = std::fs::remove_dir_all(&at).or_else(|_| std::fs::remove_file(&at));
                    let _ = std::fs::rename(aside.join(p), at);
                }
                let _ = std::fs::remove_dir(&aside);
                Err(e)
            }
        }
    }

    /// Sends `signal` to every process of the sandbox but its init (`SIGSTOP`/`SIGCONT` freeze
    /// and thaw it, as a provider's pause and resume do). Nothing in [`Isolation::Translate`].
    pub fn signal_processes(&self, signal: i32) {
        if let Some(ns) = self.ns() {
            for pid in ns.sandbox_processes() {
                if sandbox_pid(pid) != Some(1) {
                    let _ = crate::sys::kill(pid as i32, signal);
                }
            }
        }
    }

    /// Kills every process of the sandbox and removes its state (the removal finishes on a
    /// thread of its own; [`teardowns_pending`] counts it until then). Idempotent.
    pub fn destroy(&self) {
        if !self.alive.swap(false, Ordering::SeqCst) {
            return;
        }
        // Its leader is killed and left to tokio to reap, so the teardown sees it go; without
        // namespaces nothing else would end the group's members.
        if let Some(g) = self
            .daemon_group
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            && self.ns.is_none()
        {
            let _ = crate::sys::kill(-(g.pgid as i32), libc::SIGKILL);
        }
        for h in self.running.lock().expect("running").drain(..) {
            h.abort(); // dropping the exec future kills the process group
        }
        match self.ns() {
            Some(ns) => ns.teardown(self.state.clone()),
            None => {
                let _ = std::fs::remove_dir_all(&self.state);
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Every sandbox this process created (weakly: dropping the last handle destroys one).
static LIVE: Mutex<Vec<std::sync::Weak<Sandbox>>> = Mutex::new(Vec::new());

/// Destroys every sandbox of this process that still exists (for a shutdown: `execseam emulate`
/// on SIGTERM or SIGINT, whatever still holds them), then waits (up to `limit`) for their
/// teardown. True if nothing is left.
pub async fn destroy_all(limit: std::time::Duration) -> bool {
    let live: Vec<Arc<Sandbox>> = LIVE
        .lock()
        .expect("live sandboxes")
        .drain(..)
        .filter_map(|w| w.upgrade())
        .collect();
    for s in &live {
        s.destroy();
    }
    drop(live);
    wait_for_teardowns(limit).await
}

/// How many sandboxes of this process exist or are still being torn down: after the last
/// emulator is dropped, wait for 0 before exiting so nothing is left behind.
pub fn teardowns_pending() -> usize {
    ns::pending()
}

/// Waits (up to `limit`) until every sandbox of this process is torn down; true if all were.
pub async fn wait_for_teardowns(limit: std::time::Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while teardowns_pending() > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    true
}

/// The bytes of the regular files under `dir` (what a layer costs on the disk, roughly).
fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// The pid a host process has in its own (innermost) pid namespace.
/// True for a process that has exited and waits for its parent to reap it.
fn is_zombie(host_pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{host_pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(true) // gone already
}

fn sandbox_pid(host_pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The provider's environment for `user`: HOME, USER and LOGNAME from the account unless the
/// spec sets them (for the default user).
fn user_env(spec: &SandboxSpec, user: &User) -> BTreeMap<String, String> {
    let mut env = spec.env.clone();
    let default = user == &spec.user;
    for (k, v) in [
        ("HOME", user.home.as_str()),
        ("USER", user.name.as_str()),
        ("LOGNAME", user.name.as_str()),
    ] {
        if !default || !env.contains_key(k) {
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    env
}

fn strip_dir<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(dir.trim_end_matches('/'))?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix('/')
    }
}

fn join(base: &Path, rest: &str) -> String {
    if rest.is_empty() {
        base.to_string_lossy().into_owned()
    } else {
        base.join(rest).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests;
