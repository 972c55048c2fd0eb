//! Looking at the host's processes from a test: which commands an emulator left running.
//!
//! Tests give each command a unique argument (`sleep 86399.1234`, [`unique_sleep`]) and ask
//! whether any host process still has it. Pid namespaces do not hide a sandbox's processes
//! from the host's `/proc`, so this sees through every isolation mode.

use std::time::{Duration, Instant};

/// A `sleep` duration no other process on the machine has: a long sleep with a random
/// fraction (`86399.<8 digits>`), to find the command's processes by their argv.
pub fn unique_sleep() -> String {
    let r = execseam_emulator_kit::clock::random_u64() % 100_000_000;
    format!("86399.{r:08}")
}

/// The pids of the host processes whose argv contains `arg` exactly (one whole argument).
pub fn processes_with_arg(arg: &str) -> Vec<u32> {
    processes_where(|pid, argv| argv.contains(&arg.as_bytes()) && !is_zombie(pid))
}

/// The pids of the host processes other than this one whose command line (the arguments with
/// their NUL separators, read as UTF-8 with replacements) contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    processes_where(|pid, argv| {
        pid != me && String::from_utf8_lossy(&argv.join(&0u8)).contains(marker)
    })
}

/// The pids of the host processes for which `keep` holds, given the pid and the arguments of
/// the process's command line (`/proc/<pid>/cmdline`).
pub fn processes_where(mut keep: impl FnMut(u32, &[&[u8]]) -> bool) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if keep(pid, &argv) {
            out.push(pid);
        }
    }
    out
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Waits until no host process has `arg`; `Err` with the survivors after `within`.
pub async fn gone_within(arg: &str, within: Duration) -> Result<(), Vec<u32>> {
    let until = Instant::now() + within;
    loop {
        let left = processes_with_arg(arg);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(left);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kills what a failed test left behind (by pid, only processes with `arg`).
pub fn kill_leftovers(arg: &str) {
    for pid in processes_with_arg(arg) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
}

/// Sets this process's soft stack limit (what an emulator's sandboxes inherit, so their
/// `getconf ARG_MAX` is a quarter of it) until dropped. Process-wide: a test that sets it
/// affects the processes other tests of its binary start meanwhile.
pub struct StackLimit(libc::rlimit);

impl StackLimit {
    #[allow(unsafe_code)]
    /// Sets the soft limit to `bytes`, the hard one kept; the old one comes back on drop.
    pub fn set(bytes: u64) -> StackLimit {
        // SAFETY: getrlimit/setrlimit on a properly sized struct.
        unsafe {
            let mut old = std::mem::zeroed::<libc::rlimit>();
            assert_eq!(libc::getrlimit(libc::RLIMIT_STACK, &mut old), 0);
            let new = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: old.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_STACK, &new), 0);
            StackLimit(old)
        }
    }
}

impl Drop for StackLimit {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_STACK, &self.0) };
    }
}

/// Asserts that `e` is the typed refusal of a command too large to run (`InvalidCommand`,
/// never retried), whose message `says` why.
pub fn too_large(e: &execseam_core::Error, says: &str) {
    assert_eq!(
        (e.kind(), e.retry()),
        (
            execseam_core::ErrorKind::InvalidCommand,
            execseam_core::Retry::Never
        ),
        "{e}"
    );
    assert!(e.message().contains(says), "{e}");
}

/// Inspect's large command: `sh -c 'echo $#' sh` and `n` arguments of 64 KiB (it prints `n`);
/// 16 of them fit the default stack's `execve`, not a 1 MiB stack's ([`StackLimit`]).
pub fn many_64_kib_args(n: usize) -> execseam_core::Command {
    let mut argv = vec!["sh".to_owned(), "-c".into(), "echo $#".into(), "sh".into()];
    argv.extend(std::iter::repeat_n("a".repeat(64 << 10), n));
    execseam_core::Command::new(argv).expect("a valid command")
}

/// Issue 38 (D32) on an adapter that asks its sandbox's `ARG_MAX` (`size::ArgMax`): on `first`
/// (a sandbox at the host's default stack) Inspect's 16 x 64 KiB runs after one probe, and the
/// probe is not asked again; `fresh` (a new handle made while the sandbox's processes have a
/// 1 MiB stack: `ARG_MAX` 256 KiB) refuses it before its request (`requests`: the command
/// requests the emulator counted, only the probe added) and runs 2 x 64 KiB. Returns the fresh
/// handle for the caller to close.
pub async fn arg_max_is_probed<E, F, Fut>(first: &E, fresh: F, requests: impl Fn() -> u64) -> E
where
    E: execseam_core::Exec,
    F: FnOnce() -> Fut,
    Fut: Future<Output = E>,
{
    let before = requests();
    for _ in 0..2 {
        let out = first.exec(many_64_kib_args(16)).await.expect("16 x 64 KiB");
        assert_eq!(out.stdout.as_ref(), b"16\n", "{out:?}");
    }
    assert_eq!(requests(), before + 3, "one probe, then the command twice");
    let _stack = StackLimit::set(1 << 20);
    let small = fresh().await;
    let e = small.exec(many_64_kib_args(16)).await.unwrap_err();
    too_large(&e, "ARG_MAX");
    assert_eq!(requests(), before + 4, "only the probe");
    let out = small.exec(many_64_kib_args(2)).await.expect("2 x 64 KiB");
    assert_eq!(out.stdout.as_ref(), b"2\n", "{out:?}");
    small
}
