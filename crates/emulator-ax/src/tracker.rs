//! The guest's process tracker, as agent-substrate/env's `guest/process` does it (variant B):
//! ids `proc-<24 hex>`, argv executed without a shell in its own process group, output spooled
//! per stream (capped at 10 MiB with the guest's marker) and addressed by byte offsets, stdin as
//! a pipe fed by `WriteProcessInput`, at most 10 running processes, a watchdog, retention.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::watch;

use execseam_emulator_kit::Sandbox;

/// Limits, as the env library's `DefaultConfig`.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Running processes at once (10).
    pub max_concurrent: usize,
    /// Bytes kept per stream (10 MiB); then the marker, then nothing.
    pub max_log_bytes: usize,
    /// Default watchdog (1 h).
    pub default_timeout: Duration,
    /// Exited processes are forgotten after this (1 h).
    pub retention: Duration,
    /// At most this many exited processes are kept (100).
    pub max_retained: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent: 10,
            max_log_bytes: 10 * 1024 * 1024,
            default_timeout: Duration::from_secs(3600),
            retention: Duration::from_secs(3600),
            max_retained: 100,
        }
    }
}

/// Why the tracker refused.
#[derive(Debug)]
pub enum TrackerError {
    /// No such process.
    NotFound,
    /// The process exited.
    Exited,
    /// Started without stdin.
    NoStdin,
    /// stdin was closed.
    StdinClosed,
    /// Too many running processes.
    TooMany(usize),
    /// Anything else (the message is the guest's).
    Other(String),
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Exit code (0 when signalled).
    pub code: i32,
    /// Signal number (0 when it exited).
    pub signal: i32,
    /// When it was reaped.
    pub at: SystemTime,
}

/// One spooled stream.
#[derive(Default)]
struct Spool {
    data: Vec<u8>,
    written: usize,
    warned: bool,
}

impl Spool {
    /// cappedWriter.Write: keeps up to `limit` bytes, then writes the marker once.
    fn write(&mut self, p: &[u8], limit: usize) {
        if limit == 0 {
            self.data.extend_from_slice(p);
            return;
        }
        if self.written >= limit {
            self.warn(limit);
            return;
        }
        let take = p.len().min(limit - self.written);
        self.data.extend_from_slice(&p[..take]);
        self.written += take;
        if p.len() > take {
            self.warn(limit);
        }
    }

    fn warn(&mut self, limit: usize) {
        if !self.warned {
            self.warned = true;
            self.data.extend_from_slice(
                format!(
                    "\n\n[guest: maximum log limit of {} MB exceeded; remaining output truncated]\n",
                    limit / (1024 * 1024)
                )
                .as_bytes(),
            );
        }
    }
}

/// A tracked process.
pub struct Proc {
    /// `proc-<24 hex>`.
    pub id: String,
    /// argv as requested.
    pub command: Vec<String>,
    /// Its pid inside the sandbox (what the guest reports).
    pub pid: i32,
    /// Its pid on the host, which leads its process group there (what the guest signals).
    pub host_pid: i32,
    /// When it started.
    pub started_at: SystemTime,
    spools: Mutex<[Spool; 2]>,
    ended: Mutex<Option<Ended>>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    has_stdin: bool,
    stdin_closed: AtomicBool,
    /// Bumped on every output write and at the exit (the guest's notifier).
    changed: watch::Sender<u64>,
    /// Fault: every output stream of this process is cut before its exit message.
    pub cut: AtomicBool,
}

execseam_emulator_kit::debug_fields!(Proc: id, pid);

impl Proc {
    /// How it ended, once reaped (and its output fully spooled).
    pub fn ended(&self) -> Option<Ended> {
        *self.ended.lock().expect("ended")
    }

    /// Subscribes to output/exit changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The bytes of stream `i` (0 stdout, 1 stderr) from `offset`, and the new offset. An offset
    /// past the end reads nothing and stays where it is (ReadSpool).
    pub fn read(&self, i: usize, offset: i64) -> (Bytes, i64) {
        let spools = self.spools.lock().expect("spools");
        let data = &spools[i].data;
        let off = usize::try_from(offset).unwrap_or(usize::MAX);
        if off >= data.len() {
            return (Bytes::new(), offset);
        }
        (Bytes::copy_from_slice(&data[off..]), data.len() as i64)
    }

    /// Writes stdin (WriteInput).
    pub async fn write_input(&self, data: &[u8]) -> Result<usize, TrackerError> {
        if !self.has_stdin {
            return Err(TrackerError::NoStdin);
        }
        let mut stdin = self.stdin.lock().await;
        if self.stdin_closed.load(Ordering::SeqCst) {
            return Err(if self.ended().is_some() {
                TrackerError::Exited
            } else {
                TrackerError::StdinClosed
            });
        }
        let Some(pipe) = stdin.as_mut() else {
            return Err(TrackerError::Exited);
        };
        match pipe.write_all(data).await {
            Ok(()) => Ok(data.len()),
            // EPIPE (the reader is gone) or the process exited: ErrExited.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe || self.ended().is_some() => {
                Err(TrackerError::Exited)
            }
            Err(e) => Err(TrackerError::Other(format!("writing stdin: {e}"))),
        }
    }

    /// Closes stdin (CloseInput): idempotent.
    pub async fn close_input(&self) -> Result<(), TrackerError> {
        if !self.has_stdin {
            return Err(TrackerError::NoStdin);
        }
        let mut stdin = self.stdin.lock().await;
        if self.stdin_closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if let Some(mut pipe) = stdin.take() {
            let _ = pipe.shutdown().await;
        }
        Ok(())
    }
}

/// Sends `sig` to the process group `pgid` (kill(-pgid, sig)); false if it is gone (ESRCH).
pub async fn kill_group(pgid: i32, sig: i32) -> bool {
    tokio::process::Command::from(kill_command(pgid, sig))
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// [`kill_group`], blocking (for `Drop`).
pub fn kill_group_now(pgid: i32, sig: i32) {
    let _ = kill_command(pgid, sig).status();
}

/// `kill -<sig> -- -<pgid>`, its standard streams closed.
fn kill_command(pgid: i32, sig: i32) -> std::process::Command {
    // The kill(1) utility: the emulators crate has no unsafe code for kill(2).
    let mut kill = std::process::Command::new("kill");
    kill.arg(format!("-{sig}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    kill
}

/// What `StartProcess` asks for.
#[derive(Debug)]
pub struct StartOptions {
    /// argv.
    pub command: Vec<String>,
    /// Working directory ("" = the workspace).
    pub cwd: String,
    /// Extra environment.
    pub env: HashMap<String, String>,
    /// A stdin pipe.
    pub stdin: bool,
    /// Zero = the default watchdog.
    pub timeout: Duration,
}

/// The tracker of one guest.
pub struct Tracker {
    sandbox: Arc<Sandbox>,
    workspace: String,
    limits: Limits,
    processes: Mutex<HashMap<String, Arc<Proc>>>,
    active: Mutex<usize>,
    seq: AtomicU64,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("sandbox", &self.sandbox.id())
            .finish_non_exhaustive()
    }
}

impl Tracker {
    /// A tracker running commands in `sandbox`, default cwd `workspace`.
    pub fn new(sandbox: Arc<Sandbox>, workspace: impl Into<String>, limits: Limits) -> Tracker {
        Tracker {
            sandbox,
            workspace: workspace.into(),
            limits,
            processes: Mutex::new(HashMap::new()),
            active: Mutex::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// The sandbox.
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Looks a process up.
    pub fn get(&self, id: &str) -> Result<Arc<Proc>, TrackerError> {
        self.processes
            .lock()
            .expect("processes")
            .get(id)
            .cloned()
            .ok_or(TrackerError::NotFound)
    }

    /// Every process still running.
    pub fn running(&self) -> Vec<Arc<Proc>> {
        self.processes
            .lock()
            .expect("processes")
            .values()
            .filter(|p| p.ended().is_none())
            .cloned()
            .collect()
    }

    fn new_id(&self) -> String {
        // 12 random-looking bytes, hex: std's RandomState is randomly seeded per process.
        use std::hash::{BuildHasher, Hasher};
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut out = String::from("proc-");
        for part in 0..2u64 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(n);
            h.write_u64(part);
            let v = h.finish();
            let bytes = if part == 0 {
                v.to_be_bytes().to_vec()
            } else {
                v.to_be_bytes()[..4].to_vec()
            };
            for b in bytes {
                out.push_str(&format!("{b:02x}"));
            }
        }
        out
    }

    fn base_env(&self) -> BTreeMap<String, String> {
        self.sandbox.exec().config().environment()
    }

    /// What Go's exec.Command then Start check before forking, inside the sandbox's view:
    /// LookPath against the guest's own PATH, then the directory, then the program (with
    /// SysProcAttr set, a missing directory is `fork/exec <path>: no such file or directory`).
    /// Returns the program's path, or the error's text.
    async fn check_start(&self, program: &str, cwd: &str) -> Result<String, String> {
        let path_var = self.base_env().get("PATH").cloned().unwrap_or_default();
        let (program, cwd) = (program.to_owned(), cwd.to_owned());
        let checked = self.sandbox.fs(move |fs| {
            let path = if program.contains('/') {
                program.clone()
            } else {
                let found = path_var
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
                    .find(|c| is_executable(&fs.path(c)));
                match found {
                    Some(p) => p,
                    None => {
                        return Ok(Err(format!(
                            "exec: {program:?}: executable file not found in $PATH"
                        )));
                    }
                }
            };
            match std::fs::metadata(fs.path(&cwd)) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Ok(Err(format!("fork/exec {path}: not a directory"))),
                Err(_) => return Ok(Err(format!("fork/exec {path}: no such file or directory"))),
            }
            let prog = fs.path(&path);
            Ok(match std::fs::metadata(&prog) {
                Ok(m) if m.is_file() && is_executable(&prog) => Ok(path),
                Ok(_) => Err(format!("fork/exec {path}: permission denied")),
                Err(_) => Err(format!("fork/exec {path}: no such file or directory")),
            })
        });
        checked.await.unwrap_or_else(|e| Err(e.to_string()))
    }

    fn resolve_cwd(&self, cwd: &str) -> String {
        if cwd.is_empty() {
            self.workspace.clone()
        } else if cwd.starts_with('/') {
            cwd.to_owned()
        } else {
            format!("{}/{cwd}", self.workspace.trim_end_matches('/'))
        }
    }

    fn prune(&self) {
        let mut procs = self.processes.lock().expect("processes");
        let now = SystemTime::now();
        let mut exited: Vec<(SystemTime, String)> = procs
            .values()
            .filter_map(|p| p.ended().map(|e| (e.at, p.id.clone())))
            .collect();
        exited.retain(|(at, id)| {
            let old = now.duration_since(*at).unwrap_or_default() > self.limits.retention;
            if old {
                procs.remove(id);
            }
            !old
        });
        if exited.len() > self.limits.max_retained {
            exited.sort();
            for (_, id) in &exited[..exited.len() - self.limits.max_retained] {
                procs.remove(id);
            }
        }
    }

    /// Starts a process (Tracker.Start). Errors are the guest's messages.
    pub async fn start(self: &Arc<Self>, opts: StartOptions) -> Result<Arc<Proc>, TrackerError> {
        if opts.command.is_empty() {
            return Err(TrackerError::Other("command cannot be empty".into()));
        }
        self.prune();
        {
            let mut active = self.active.lock().expect("active");
            if *active >= self.limits.max_concurrent {
                return Err(TrackerError::TooMany(self.limits.max_concurrent));
            }
            *active += 1;
        }
        match self.spawn(opts).await {
            Ok(p) => Ok(p),
            Err(e) => {
                *self.active.lock().expect("active") -= 1;
                Err(e)
            }
        }
    }

    async fn spawn(self: &Arc<Self>, opts: StartOptions) -> Result<Arc<Proc>, TrackerError> {
        let starting = |e: String| TrackerError::Other(format!("starting process: {e}"));
        // Go: exec.Command does LookPath first, then Start forks and chdirs; with SysProcAttr set,
        // a missing directory is reported as `fork/exec <path>: no such file or directory`.
        let cwd = self.resolve_cwd(&opts.cwd);
        let path = self
            .check_start(&opts.command[0], &cwd)
            .await
            .map_err(starting)?;
        if opts.command.iter().any(|a| a.contains('\0')) || cwd.contains('\0') {
            return Err(starting(format!("fork/exec {path}: invalid argument")));
        }

        // exec.Command: argv exactly (Args[0] the name as given, Path the resolved program).
        let mut proc = tokio::process::Command::new(&path);
        proc.arg0(&opts.command[0]).args(&opts.command[1..]);
        let mut env = self.base_env();
        env.extend(opts.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        proc.env_clear()
            .envs(env)
            .stdin(if opts.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        let spawned = self
            .sandbox
            .spawn(proc, self.sandbox.user(), &cwd)
            .await
            .map_err(|e| match e {
                execseam_spawn::SpawnError::Workdir(_) => {
                    starting(format!("fork/exec {path}: no such file or directory"))
                }
                execseam_spawn::SpawnError::Io(e) => starting(format!("fork/exec {path}: {e}")),
            })?;
        let mut child = spawned.child;
        let host_pid = i32::try_from(spawned.host_pid).unwrap_or(0);
        let pid = i32::try_from(spawned.pid).unwrap_or(0);
        let (changed, _) = watch::channel(0u64);
        let proc = Arc::new(Proc {
            id: self.new_id(),
            command: opts.command.clone(),
            pid,
            host_pid,
            started_at: SystemTime::now(),
            spools: Mutex::new([Spool::default(), Spool::default()]),
            ended: Mutex::new(None),
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            has_stdin: opts.stdin,
            stdin_closed: AtomicBool::new(false),
            changed,
            cut: AtomicBool::new(false),
        });
        self.processes
            .lock()
            .expect("processes")
            .insert(proc.id.clone(), proc.clone());

        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        let limit = self.limits.max_log_bytes;
        let pump_out = tokio::spawn(pump(out, proc.clone(), 0, limit));
        let pump_err = tokio::spawn(pump(err, proc.clone(), 1, limit));
        let timeout = if opts.timeout.is_zero() {
            self.limits.default_timeout
        } else {
            opts.timeout
        };
        let tracker = self.clone();
        let reaped = proc.clone();
        let reaper = tokio::spawn(async move {
            let deadline = Instant::now() + timeout;
            let status = tokio::select! {
                s = child.wait() => s,
                () = tokio::time::sleep_until(deadline.into()) => {
                    kill_group(host_pid, 9).await;
                    child.wait().await
                }
            };
            // Wait returns after the output copiers finished (Go's cmd.Wait).
            let _ = pump_out.await;
            let _ = pump_err.await;
            use std::os::unix::process::ExitStatusExt;
            let (code, signal) = match status {
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(c), _) => (c, 0),
                    (None, Some(sig)) => (0, sig),
                    _ => (-1, 0),
                },
                Err(_) => (-1, 0),
            };
            *reaped.ended.lock().expect("ended") = Some(Ended {
                code,
                signal,
                at: SystemTime::now(),
            });
            reaped.stdin_closed.store(true, Ordering::SeqCst);
            reaped.stdin.lock().await.take();
            reaped.changed.send_modify(|v| *v += 1);
            *tracker.active.lock().expect("active") -= 1;
        });
        // Not tracked by the sandbox: the guest kills process groups itself (GuestState::vanish)
        // and the reaper must live on to record how they ended.
        drop(reaper);
        Ok(proc)
    }
}

async fn pump<R: AsyncRead + Unpin>(mut r: R, proc: Arc<Proc>, i: usize, limit: usize) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                proc.spools.lock().expect("spools")[i].write(&buf[..n], limit);
                proc.changed.send_modify(|v| *v += 1);
            }
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
