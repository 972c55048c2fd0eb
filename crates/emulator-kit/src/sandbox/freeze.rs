//! Pausing a sandbox: every process of it in one cgroup v2 group, frozen and thawed as a whole
//! (`cgroup.freeze`), with `SIGSTOP`/`SIGCONT` as the fallback where no writable cgroup v2
//! hierarchy exists.
//!
//! Why the freezer and not signals: it is atomic for the whole group (a process forked between
//! a scan and a signal cannot escape), invisible from inside (no `SIGCHLD` to parents, no
//! "Stopped" from shells, no `SIGCONT` handlers run, a process the user stopped on purpose stays
//! stopped), and `SIGKILL` still kills a frozen task, so destroying a paused sandbox needs no
//! thaw. Processes join the group at birth (the init through `unshare`'s `pre_exec`, every
//! command through the launcher's), never after, so none runs outside it.
//!
//! The group is `<v2 mount><this process's v2 cgroup>/execseam-<pid>-<n>`: the v2 mount is
//! found in `/proc/self/mountinfo` (`/sys/fs/cgroup` on pure-v2 hosts, `/sys/fs/cgroup/unified`
//! on hybrid ones). Groups left by an emulator that died while a sandbox was frozen (its
//! lifeline reader frozen too, so the init never noticed) are killed and removed when the next
//! emulator of this host creates its first group.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

pub(crate) use crate::sys::{
    join_cgroup_in_child as join_in_child, join_cgroup_in_child_tokio as join_in_child_tokio,
};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One sandbox's cgroup.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for the children's `pre_exec` (writing "0" moves the writer).
    procs: File,
}

/// How long a freeze may take before it counts as failed (freezing is asynchronous: tasks in
/// uninterruptible sleep freeze when they leave it).
const FREEZE_LIMIT: Duration = Duration::from_secs(5);

/// The parent of this process's sandbox groups, if a writable cgroup v2 hierarchy exists.
fn parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT
        .get_or_init(|| {
            if std::env::var("EXECSEAM_EMULATOR_FREEZER").as_deref() == Ok("signals") {
                return None;
            }
            let mount = v2_mount()?;
            let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let own = own.lines().find_map(|l| l.strip_prefix("0::"))?;
            let dir = mount.join(own.trim_start_matches('/'));
            sweep(&dir);
            Some(dir)
        })
        .as_deref()
}

/// Where the cgroup v2 hierarchy is mounted.
fn v2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// Kills and removes groups of emulators that are gone.
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("execseam-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = e.path();
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
        wait_unpopulated(&dir, Duration::from_secs(2));
        let _ = std::fs::remove_dir(&dir);
    }
}

fn wait_unpopulated(dir: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while event(dir, "populated") == Some(true) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A flag of `cgroup.events`.
fn event(dir: &Path, key: &str) -> Option<bool> {
    let events = std::fs::read_to_string(dir.join("cgroup.events")).ok()?;
    events.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then_some(v.trim() == "1")
    })
}

impl Cgroup {
    /// A new, empty group, or `None` where there is no writable cgroup v2 hierarchy (the
    /// sandbox then pauses with signals).
    pub(crate) fn create() -> Option<Cgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let parent = parent()?;
        let dir = parent.join(format!(
            "execseam-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(e) = std::fs::create_dir(&dir) {
            tracing::debug!("no cgroup for a sandbox ({e}): pause uses SIGSTOP");
            return None;
        }
        let procs = match std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
        {
            Ok(f) if dir.join("cgroup.freeze").exists() => f,
            _ => {
                let _ = std::fs::remove_dir(&dir);
                return None;
            }
        };
        Some(Cgroup { dir, procs })
    }

    /// The fd a child writes "0" to (in `pre_exec`) to join the group.
    pub(crate) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Freezes every process of the group and waits until the kernel says it is frozen.
    pub(crate) fn freeze(&self) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.freeze"), "1")?;
        let deadline = Instant::now() + FREEZE_LIMIT;
        loop {
            match event(&self.dir, "frozen") {
                Some(true) => return Ok(()),
                _ if Instant::now() >= deadline => {
                    let _ = self.thaw();
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the sandbox's processes did not freeze within 5 s",
                    ));
                }
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Thaws the group.
    pub(crate) fn thaw(&self) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.freeze"), "0")
    }

    /// Kills every process of the group (frozen or not).
    pub(crate) fn kill(&self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
    }

    /// Removes the group once its processes are gone (bounded wait).
    pub(crate) fn remove(&self) {
        self.kill();
        wait_unpopulated(&self.dir, Duration::from_secs(10));
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Says which pause mechanism this host gives sandboxes (for banners and docs).
pub fn describe() -> &'static str {
    if parent().is_some() {
        "pause: cgroup v2 freezer"
    } else {
        "pause: SIGSTOP/SIGCONT (no writable cgroup v2 hierarchy)"
    }
}
