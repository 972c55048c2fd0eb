//! The processes the task command router runs: argv executed without a shell in its own process
//! group inside the sandbox, stdout and stderr kept whole and addressed by byte offset (so a read
//! can resume after a reconnect, `TaskExecStdioReadRequest.offset`), stdin fed through a queue
//! by offset (`TaskExecStdinWrite`, `TaskExecStdinWriteStream`), `timeout_secs` enforced here
//! with SIGKILL, and the end recorded as a code or a signal (`TaskExecWaitResponse.exit_status`).
//!
//! An exec with `pty_info` (modal 1.6.4 `Sandbox.exec(pty=True)` sends `default_pty_info()`,
//! `modal/sandbox/_common.py`: the caller's window size, `TERM`, `PTY_TYPE_SHELL`,
//! `no_terminate_on_idle_stdin`) runs on a real pseudo-terminal of the sandbox
//! ([`Sandbox::spawn_pty`]): everything it writes is stdout ("all output (stdout and stderr from
//! the process) is multiplexed into stdout, and the stderr stream is effectively empty", the
//! `exec` docstring), stdin is typed into the terminal. Modal has no resize RPC for an exec.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use execseam_emulator_kit::Sandbox;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// Where stderr goes (`TaskExecStderrConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StderrTo {
    /// Discarded (0, the proto3 default).
    Devnull,
    /// Its own stream (1).
    Pipe,
    /// Merged into stdout (2).
    Stdout,
}

/// What `TaskExecStart` asks for, resolved against the sandbox.
#[derive(Clone, Debug)]
pub struct Spawn {
    /// argv.
    pub argv: Vec<String>,
    /// Absolute working directory inside the sandbox.
    pub cwd: String,
    /// The whole environment.
    pub env: BTreeMap<String, String>,
    /// stdout is piped to the client (else discarded).
    pub stdout: bool,
    /// Where stderr goes.
    pub stderr: StderrTo,
    /// Killed after this long (`timeout_secs`).
    pub timeout: Option<Duration>,
    /// Keep only the most recent this many bytes of each stream (`None`: all of it).
    pub retain: Option<usize>,
    /// Run on a pseudo-terminal of this size (`pty_info`); `stdout`/`stderr` are then unused.
    pub pty: Option<execseam_emulator_kit::PtySize>,
}

/// Why a process could not start.
#[derive(Debug)]
pub enum SpawnError {
    /// The program or the working directory does not exist.
    NotFound(String),
    /// The program exists but may not be executed (no execute bit, a directory).
    PermissionDenied(String),
    /// Anything else.
    Other(String),
}

/// One output stream: the bytes retained (the most recent `cap`, or all) and where they start.
#[derive(Default)]
struct Spool {
    data: std::collections::VecDeque<u8>,
    /// The offset of `data[0]` in the whole stream (bytes dropped before it).
    base: u64,
    cap: Option<usize>,
    eof: bool,
}

impl Spool {
    fn push(&mut self, bytes: &[u8]) {
        self.data.extend(bytes);
        if let Some(cap) = self.cap
            && self.data.len() > cap
        {
            let drop = self.data.len() - cap;
            self.data.drain(..drop);
            self.base += drop as u64;
        }
    }
}

#[derive(Default)]
struct Stdin {
    /// Bytes accepted so far (`TaskExecStdinStatusResponse.num_bytes_written`).
    accepted: u64,
    closed: bool,
    tx: Option<mpsc::UnboundedSender<Bytes>>,
    /// Bumped by `TaskExecStdinStatus`, which evicts any stream in flight.
    generation: u64,
}

/// Why a stdin write was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum StdinError {
    /// Stdin is closed, or the process has exited.
    Closed,
    /// The write starts past what was accepted (a gap).
    Gap {
        /// What the server has.
        accepted: u64,
    },
    /// A newer stream (or a status query) took over.
    Evicted,
}

/// One exec'd process.
pub struct Proc {
    /// The client's `exec_id`.
    pub id: String,
    /// Its pid on the host, which leads its process group.
    pub host_pid: u32,
    sandbox: std::sync::Weak<Sandbox>,
    /// Set by the `cut` fault: its reads and waits end without a gRPC status.
    pub cut: AtomicBool,
    spools: Mutex<[Spool; 2]>,
    ended: Mutex<Option<Ended>>,
    stdin: Mutex<Stdin>,
    changed: watch::Sender<u64>,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("id", &self.id)
            .field("host_pid", &self.host_pid)
            .field("ended", &self.ended())
            .finish_non_exhaustive()
    }
}

impl Proc {
    /// How it ended, if it has.
    pub fn ended(&self) -> Option<Ended> {
        *self.ended.lock().expect("ended")
    }

    /// A receiver that changes whenever output arrives or the process ends.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Output of stream `fd` (0 stdout, 1 stderr) from `offset` (at most `max` bytes): the
    /// offset the bytes start at (past `offset` when the bytes before were no longer retained),
    /// the bytes, and whether that stream is finished (no byte will ever follow them).
    pub fn read(&self, fd: usize, offset: u64, max: usize) -> (u64, Bytes, bool) {
        let spools = self.spools.lock().expect("spools");
        let s = &spools[fd];
        let total = s.base + s.data.len() as u64;
        let from = offset.clamp(s.base, total);
        let start = (from - s.base) as usize;
        let end = start.saturating_add(max).min(s.data.len());
        let chunk: Vec<u8> = s.data.range(start..end).copied().collect();
        (from, Bytes::from(chunk), s.eof && end == s.data.len())
    }

    /// Accepts stdin bytes `data` written at `offset`; bytes before what was already accepted
    /// are a retry's overlap and are dropped. `eof` closes stdin after them. `generation` is the
    /// stream's ticket from [`Proc::stdin_ticket`] (`None` for the unary write).
    pub fn write_stdin(
        &self,
        offset: u64,
        data: &[u8],
        eof: bool,
        generation: Option<u64>,
    ) -> Result<(), StdinError> {
        let mut st = self.stdin.lock().expect("stdin");
        if generation.is_some_and(|g| g != st.generation) {
            return Err(StdinError::Evicted);
        }
        let end = offset + data.len() as u64;
        if st.closed {
            // A retry of the write that closed stdin is fine; anything new is refused.
            return if end <= st.accepted && eof {
                Ok(())
            } else {
                Err(StdinError::Closed)
            };
        }
        if self.ended().is_some() {
            return Err(StdinError::Closed);
        }
        if offset > st.accepted {
            return Err(StdinError::Gap {
                accepted: st.accepted,
            });
        }
        let skip = (st.accepted - offset) as usize;
        if skip < data.len() {
            let fresh = Bytes::copy_from_slice(&data[skip..]);
            st.accepted += fresh.len() as u64;
            if let Some(tx) = &st.tx {
                let _ = tx.send(fresh);
            }
        }
        if eof {
            st.closed = true;
            st.tx = None; // the writer drains the queue, then closes the pipe
        }
        Ok(())
    }

    /// `TaskExecStdinStatus`: what was accepted and whether stdin is closed. Evicts any stream
    /// in flight (as the proto documents).
    pub fn stdin_status(&self) -> (u64, bool) {
        let mut st = self.stdin.lock().expect("stdin");
        st.generation += 1;
        (st.accepted, st.closed)
    }

    /// A ticket for one `TaskExecStdinWriteStream`: it evicts the stream before it.
    pub fn stdin_ticket(&self) -> u64 {
        let mut st = self.stdin.lock().expect("stdin");
        st.generation += 1;
        st.generation
    }

    /// Kills the process group with `sig`.
    pub fn kill(&self, sig: i32) {
        if self.ended().is_none()
            && let Some(sb) = self.sandbox.upgrade()
        {
            let _ = sb.signal_group(self.host_pid, sig);
        }
    }
}

/// Starts a process in `sandbox` as its user, argv exactly (no shell). A working directory or
/// a program that does not exist fails the spawn inside the sandbox (ENOENT) before anything
/// runs.
pub async fn spawn(sandbox: &Arc<Sandbox>, id: &str, spec: Spawn) -> Result<Arc<Proc>, SpawnError> {
    if let Some(size) = spec.pty {
        return spawn_pty(sandbox, id, spec, size).await;
    }
    let mut proc = tokio::process::Command::new(&spec.argv[0]);
    proc.args(&spec.argv[1..])
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(if spec.stdout || spec.stderr == StderrTo::Stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(match spec.stderr {
            StderrTo::Devnull => Stdio::null(),
            StderrTo::Pipe | StderrTo::Stdout => Stdio::piped(),
        })
        .kill_on_drop(false);
    let spawned = sandbox
        .spawn(proc, sandbox.user(), &spec.cwd)
        .await
        .map_err(|e| spawn_error(e, &spec))?;
    let mut child = spawned.child;
    let (p, rx) = new_proc(sandbox, id, spawned.host_pid, &spec);
    // stdout-only exec: stderr is discarded; merged: both pipes feed spool 0.
    let out_fd = 0;
    let err_fd = if spec.stderr == StderrTo::Stdout {
        0
    } else {
        1
    };
    let keep_err = spec.stderr == StderrTo::Pipe || spec.stdout;
    let pump_out = child
        .stdout
        .take()
        .map(|r| tokio::spawn(pump(r, p.clone(), out_fd, spec.stdout)));
    let pump_err = child
        .stderr
        .take()
        .map(|r| tokio::spawn(pump(r, p.clone(), err_fd, keep_err)));
    if let Some(mut pipe) = child.stdin.take() {
        tokio::spawn(async move {
            let mut rx = rx;
            while let Some(chunk) = rx.recv().await {
                if pipe.write_all(&chunk).await.is_err() {
                    break; // the process stopped reading (EPIPE): the rest is dropped
                }
            }
            let _ = pipe.shutdown().await;
        });
    }
    reap(p.clone(), child, spec.timeout, [pump_out, pump_err]);
    Ok(p)
}

/// [`spawn`] on a pseudo-terminal: its output is stream 0, stdin is typed into it (a closed
/// stdin types nothing: a terminal has no end of input but ^D, which is the caller's to send).
async fn spawn_pty(
    sandbox: &Arc<Sandbox>,
    id: &str,
    spec: Spawn,
    size: execseam_emulator_kit::PtySize,
) -> Result<Arc<Proc>, SpawnError> {
    let mut proc = tokio::process::Command::new(&spec.argv[0]);
    proc.args(&spec.argv[1..])
        .env_clear()
        .envs(&spec.env)
        .kill_on_drop(false);
    let spawned = sandbox
        .spawn_pty(proc, sandbox.user(), &spec.cwd, size)
        .await
        .map_err(|e| spawn_error(e, &spec))?;
    let (p, mut rx) = new_proc(sandbox, id, spawned.host_pid, &spec);
    let master = spawned.master;
    let (reader, out) = (master.clone(), p.clone());
    let pump_out = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = reader.read(&mut buf).await {
            out.spools.lock().expect("spools")[0].push(&buf[..n]);
            out.changed.send_modify(|v| *v += 1);
        }
    });
    tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            if master.write_all(&chunk).await.is_err() {
                break; // the terminal closed: the rest is dropped
            }
        }
    });
    reap(
        p.clone(),
        spawned.child,
        spec.timeout,
        [Some(pump_out), None],
    );
    Ok(p)
}

/// Why the harness could not start `spec`, as the router says it.
fn spawn_error(e: execseam_spawn::SpawnError, spec: &Spawn) -> SpawnError {
    match e {
        execseam_spawn::SpawnError::Workdir(_) => SpawnError::NotFound(format!(
            "failed to spawn exec: working directory {:?}: No such file or directory (os error 2)",
            spec.cwd
        )),
        execseam_spawn::SpawnError::Io(e) => {
            let program = format!("failed to spawn exec: program {:?}: {e}", spec.argv[0]);
            match e.kind() {
                std::io::ErrorKind::NotFound => SpawnError::NotFound(program),
                std::io::ErrorKind::PermissionDenied => SpawnError::PermissionDenied(program),
                _ => SpawnError::Other(format!("failed to spawn exec {:?}: {e}", spec.argv[0])),
            }
        }
    }
}

/// The record of a process just spawned, and the receiving end of its stdin queue.
fn new_proc(
    sandbox: &Arc<Sandbox>,
    id: &str,
    host_pid: u32,
    spec: &Spawn,
) -> (Arc<Proc>, mpsc::UnboundedReceiver<Bytes>) {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let (changed, _) = watch::channel(0u64);
    let p = Arc::new(Proc {
        id: id.to_owned(),
        host_pid,
        sandbox: Arc::downgrade(sandbox),
        cut: AtomicBool::new(false),
        spools: Mutex::new(std::array::from_fn(|_| Spool {
            cap: spec.retain,
            ..Spool::default()
        })),
        ended: Mutex::new(None),
        stdin: Mutex::new(Stdin {
            tx: Some(tx),
            ..Stdin::default()
        }),
        changed,
    });
    (p, rx)
}

/// Waits for `child` (killed at `timeout`), lets the `pumps` deliver what is left, then records
/// the end.
fn reap(
    reaped: Arc<Proc>,
    mut child: tokio::process::Child,
    timeout: Option<Duration>,
    pumps: [Option<tokio::task::JoinHandle<()>>; 2],
) {
    tokio::spawn(async move {
        let status = match timeout {
            None => child.wait().await,
            Some(t) => {
                let deadline = Instant::now() + t;
                tokio::select! {
                    s = child.wait() => s,
                    () = tokio::time::sleep_until(deadline.into()) => {
                        reaped.kill(9);
                        child.wait().await
                    }
                }
            }
        };
        // Output still in the pipes is delivered: wait for the copiers to reach EOF, but not
        // for descendants that keep a pipe open after the process itself is gone.
        // One bound for both pipes, not one each.
        let drained = async {
            for pump in pumps.into_iter().flatten() {
                let _ = pump.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), drained).await;
        use std::os::unix::process::ExitStatusExt;
        let ended = match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(c), _) => Ended::Code(c),
                (None, Some(sig)) => Ended::Signal(sig),
                _ => Ended::Code(-1),
            },
            Err(_) => Ended::Code(-1),
        };
        {
            let mut spools = reaped.spools.lock().expect("spools");
            spools[0].eof = true;
            spools[1].eof = true;
        }
        *reaped.ended.lock().expect("ended") = Some(ended);
        {
            let mut st = reaped.stdin.lock().expect("stdin");
            st.tx = None;
        }
        reaped.changed.send_modify(|v| *v += 1);
    });
}

async fn pump<R: AsyncRead + Unpin>(mut r: R, p: Arc<Proc>, fd: usize, keep: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if keep {
                    p.spools.lock().expect("spools")[fd].push(&buf[..n]);
                    p.changed.send_modify(|v| *v += 1);
                }
            }
        }
    }
}

/// Waits until `p` has ended.
pub async fn wait(p: &Proc) -> Ended {
    let mut rx = p.subscribe();
    loop {
        if let Some(e) = p.ended() {
            return e;
        }
        if rx.changed().await.is_err() {
            // The sender lives in `p` itself: this cannot happen while `p` is borrowed.
            std::future::pending::<()>().await;
        }
    }
}

/// Marks a process cut (see [`Proc::cut`]).
pub fn cut(p: &Proc) {
    p.cut.store(true, Ordering::SeqCst);
}
