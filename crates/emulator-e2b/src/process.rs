//! `process.Process`: Start and Connect (server streams), StreamInput (client stream), List,
//! SendInput, SendSignal, CloseStdin, Update; with envd's semantics (`handler.go`, `start.go`):
//! one `start{pid}` first, `data` chunks of at most 32 KiB per stream, keepalives after
//! `Keepalive-Ping-Interval` seconds without data (90 by default), one `end` with Go's
//! `ProcessState` strings, then the end-stream message. Closing the stream does not kill the
//! process; `Connect-Timeout-Ms` on `Start` does (SIGKILL, then `deadline_exceeded`).
//!
//! A `Start` with `pty{size}` runs the process on a real terminal of the sandbox
//! ([`Sandbox::spawn_pty`](execseam_emulator_kit::Sandbox::spawn_pty)), as envd's `pty.StartWithSize`:
//! output is `pty` data (16 KiB chunks), `pty` input is typed into the terminal, `Update{pty}`
//! resizes it, and the terminal closes once the process is reaped (`Wait` closes it).

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::connect::{self as rpc, RpcError, end_stream, envelope, message};
use super::{EnvdRequest, Sbx, State, StreamFault, User, plain_error, resolve, user_of};
use execseam_emulator_kit::{Fault, PtyMaster, PtySize};

const CHUNK: usize = 32 << 10;
/// envd's `ptyChunkSize`.
const PTY_CHUNK: usize = 16 << 10;
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);
/// How long output is still read after the process exited (a background child may hold the
/// pipes open).
const DRAIN: Duration = Duration::from_secs(1);
const STREAM_CT: &str = "application/connect+json";

/// What a process publishes to its streams.
#[derive(Clone, Debug)]
pub(crate) enum Out {
    Stdout(Bytes),
    Stderr(Bytes),
    /// A PTY process's terminal output (stdout and stderr merged by the terminal).
    Pty(Bytes),
    End(EndInfo),
}

/// `ProcessEvent.EndEvent` from Go's `ProcessState`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EndInfo {
    pub exit_code: i32,
    pub exited: bool,
    pub status: String,
    pub error: Option<String>,
}

/// One process envd tracks.
pub(crate) struct Proc {
    /// Its pid inside the sandbox (what envd reports and what `echo $$` prints).
    pub pid: u32,
    /// Its pid on the host: the one envd signals. A non-PTY process shares one group with the
    /// sandbox's other non-PTY processes (envd's, stood for by the emulator-kit's daemon group);
    /// a PTY process leads a session of its own.
    host_pid: u32,
    pub tag: Option<String>,
    pub config: Value,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// A PTY process's terminal (envd's `tty`): input is typed into it, `Update` resizes it.
    /// Closed (taken) when the process has exited, as envd's `Wait` closes it.
    tty: Mutex<Option<PtyMaster>>,
    subscribers: Mutex<Vec<mpsc::Sender<Out>>>,
    reaped: AtomicBool,
}

#[allow(unsafe_code)]
fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let r = unsafe { libc::kill(pid, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Proc {
    /// Signals the process itself, as envd does (`cmd.Process.Signal`).
    pub(crate) fn signal(&self, sig: i32) -> io::Result<()> {
        if self.reaped.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        kill(self.host_pid as i32, sig)
    }

    /// Kills the group it leads, if it leads one (a PTY process's session), else the process:
    /// the sandbox is going away (its daemon group goes with it).
    pub(crate) fn kill_group(&self) {
        if !self.reaped.load(Ordering::SeqCst)
            && kill(-(self.host_pid as i32), libc::SIGKILL).is_err()
        {
            self.kill_now();
        }
    }

    /// SIGKILLs the process itself when its `Start`'s context ends, as envd's
    /// `exec.CommandContext` does (Go's default `Cancel` is `Process.Kill`): its children live on.
    pub(crate) fn kill_now(&self) {
        let _ = self.signal(libc::SIGKILL);
    }

    fn subscribe(&self) -> mpsc::Receiver<Out> {
        let (tx, rx) = mpsc::channel(64);
        self.subscribers.lock().expect("subscribers").push(tx);
        rx
    }

    /// Delivers to every stream (with back-pressure, like envd's multiplexer); streams whose
    /// client went away are dropped.
    async fn publish(&self, out: Out) {
        let subs: Vec<_> = self.subscribers.lock().expect("subscribers").clone();
        let mut gone = Vec::new();
        for (i, tx) in subs.iter().enumerate() {
            if tx.send(out.clone()).await.is_err() {
                gone.push(i);
            }
        }
        if !gone.is_empty() {
            self.subscribers
                .lock()
                .expect("subscribers")
                .retain(|tx| !tx.is_closed());
        }
    }
}

/// Go's `syscall.Signal.String()` on Linux.
pub(crate) fn go_signal_name(sig: i32) -> String {
    const NAMES: [&str; 31] = [
        "hangup",
        "interrupt",
        "quit",
        "illegal instruction",
        "trace/breakpoint trap",
        "aborted",
        "bus error",
        "floating point exception",
        "killed",
        "user defined signal 1",
        "segmentation fault",
        "user defined signal 2",
        "broken pipe",
        "alarm clock",
        "terminated",
        "stack fault",
        "child exited",
        "continued",
        "stopped (signal)",
        "stopped",
        "stopped (tty input)",
        "stopped (tty output)",
        "urgent I/O condition",
        "CPU time limit exceeded",
        "file size limit exceeded",
        "virtual timer expired",
        "profiling timer expired",
        "window changed",
        "I/O possible",
        "power failure",
        "bad system call",
    ];
    match usize::try_from(sig)
        .ok()
        .and_then(|s| NAMES.get(s.wrapping_sub(1)))
    {
        Some(n) => (*n).to_owned(),
        None => format!("signal {sig}"),
    }
}

fn end_info(status: io::Result<ExitStatus>) -> EndInfo {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => {
            if let Some(code) = s.code() {
                let text = format!("exit status {code}");
                EndInfo {
                    exit_code: code,
                    exited: true,
                    error: (code != 0).then(|| text.clone()),
                    status: text,
                }
            } else {
                let sig = s.signal().unwrap_or(0);
                let mut text = format!("signal: {}", go_signal_name(sig));
                if s.core_dumped() {
                    text.push_str(" (core dumped)");
                }
                EndInfo {
                    exit_code: -1,
                    exited: false,
                    error: Some(text.clone()),
                    status: text,
                }
            }
        }
        Err(e) => EndInfo {
            exit_code: -1,
            exited: false,
            status: String::new(),
            error: Some(e.to_string()),
        },
    }
}

/// The end event in proto3 JSON: `exitCode` omitted when 0, `exited` when false.
fn end_json(e: &EndInfo) -> Value {
    let mut end = serde_json::Map::new();
    if e.exit_code != 0 {
        end.insert("exitCode".into(), json!(e.exit_code));
    }
    if e.exited {
        end.insert("exited".into(), json!(true));
    }
    if !e.status.is_empty() {
        end.insert("status".into(), json!(e.status));
    }
    if let Some(err) = &e.error {
        end.insert("error".into(), json!(err));
    }
    json!({"event": {"end": Value::Object(end)}})
}

fn data_json(out: &Out) -> Option<Value> {
    match out {
        Out::Stdout(b) => Some(json!({"event": {"data": {"stdout": B64.encode(b)}}})),
        Out::Stderr(b) => Some(json!({"event": {"data": {"stderr": B64.encode(b)}}})),
        Out::Pty(b) => Some(json!({"event": {"data": {"pty": B64.encode(b)}}})),
        Out::End(_) => None,
    }
}

async fn read_opt<R: tokio::io::AsyncRead + Unpin>(
    r: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Reads the process's output until it exited and its pipes closed (or [`DRAIN`] after the
/// exit), publishing every chunk, then the end event; then envd forgets the process.
async fn pump(proc: Arc<Proc>, mut child: Child, sbx: Weak<Sbx>) {
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let (mut ob, mut eb) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut status = None;
    let mut drain_until: Option<Instant> = None;
    while out.is_some() || err.is_some() || status.is_none() {
        tokio::select! {
            r = read_opt(&mut out, &mut ob), if out.is_some() => match r {
                Ok(n) if n > 0 => proc.publish(Out::Stdout(Bytes::copy_from_slice(&ob[..n]))).await,
                _ => out = None,
            },
            r = read_opt(&mut err, &mut eb), if err.is_some() => match r {
                Ok(n) if n > 0 => proc.publish(Out::Stderr(Bytes::copy_from_slice(&eb[..n]))).await,
                _ => err = None,
            },
            st = child.wait(), if status.is_none() => (status, drain_until) = reaped(&proc, st),
            () = drained(drain_until) => break,
        }
    }
    let end = end_info(status.expect("the loop ends after the exit"));
    retire(&proc, end, &sbx).await;
}

/// The process was reaped with `st`: its status, and the end of the drain after the exit.
fn reaped(
    proc: &Proc,
    st: io::Result<ExitStatus>,
) -> (Option<io::Result<ExitStatus>>, Option<Instant>) {
    proc.reaped.store(true, Ordering::SeqCst);
    (Some(st), Some(Instant::now() + DRAIN))
}

/// Sleeps until the end of the drain after the exit (`None`: not exited, forever).
async fn drained(until: Option<Instant>) {
    match until {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// How long envd keeps an ended process's end event for a late `Connect` (envd >= 0.6.12:
/// "terminatedRetentionTTL is how long a process's terminal event is retained after it exits, so
/// a late Connect can still recover the exit code", e2b-dev/infra
/// `packages/envd/internal/services/process/service.go`). Only the end event: no output.
pub(crate) const TERMINATED_RETENTION: Duration = Duration::from_secs(30);

/// An ended process's end event, kept until `until`.
pub(crate) struct Retained {
    tag: Option<String>,
    end: EndInfo,
    until: Instant,
}

/// Publishes the end event, then moves the process from the live map to the retained ends
/// (envd's `finalizeTermination`: cached before it is removed).
async fn retire(proc: &Proc, end: EndInfo, sbx: &Weak<Sbx>) {
    proc.publish(Out::End(end.clone())).await;
    proc.subscribers.lock().expect("subscribers").clear();
    if let Some(sbx) = sbx.upgrade() {
        let now = Instant::now();
        let mut kept = sbx.terminated.lock().expect("terminated");
        kept.retain(|_, r| r.until > now);
        kept.insert(
            proc.pid,
            Retained {
                tag: proc.tag.clone(),
                end,
                until: now + TERMINATED_RETENTION,
            },
        );
        drop(kept);
        sbx.procs.lock().expect("procs").remove(&proc.pid);
    }
}

/// The retained end of the process `sel` names, if it ended less than
/// [`TERMINATED_RETENTION`] ago: its pid and end event.
fn retained(sbx: &Sbx, sel: &Selector) -> Option<(u32, EndInfo)> {
    let now = Instant::now();
    let kept = sbx.terminated.lock().expect("terminated");
    kept.iter()
        .filter(|(_, r)| r.until > now)
        .find(|(pid, r)| match sel {
            Selector::Pid(p) => *pid == p,
            Selector::Tag(t) => r.tag.as_deref() == Some(t.as_str()),
        })
        .map(|(pid, r)| (*pid, r.end.clone()))
}

/// [`pump`] for a PTY process: the terminal's output in 16 KiB chunks until the process exited
/// (then what the terminal still holds, until it reads as closed or [`DRAIN`] passed), the end
/// event; then the terminal is closed (envd's `Wait` closes it right after the exit, so a
/// background child still holding it gets a hang-up) and envd forgets the process.
async fn pump_pty(proc: Arc<Proc>, mut child: Child, master: PtyMaster, sbx: Weak<Sbx>) {
    let mut buf = vec![0u8; PTY_CHUNK];
    let mut status = None;
    let mut open = true;
    let mut drain_until: Option<Instant> = None;
    while open || status.is_none() {
        tokio::select! {
            r = master.read(&mut buf), if open => match r {
                Ok(n) if n > 0 => proc.publish(Out::Pty(Bytes::copy_from_slice(&buf[..n]))).await,
                _ => open = false,
            },
            st = child.wait(), if status.is_none() => (status, drain_until) = reaped(&proc, st),
            () = drained(drain_until) => break,
        }
    }
    proc.tty.lock().expect("tty").take();
    drop(master);
    let end = end_info(status.expect("the loop ends after the exit"));
    retire(&proc, end, &sbx).await;
}

/// The parsed `ProcessConfig` of a `StartRequest`.
struct Spawn {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
    tag: Option<String>,
    stdin: bool,
    /// `pty.size` (envd starts the process on a terminal of that size: `pty.StartWithSize`).
    pty: Option<PtySize>,
    config: Value,
}

fn parse_start(v: &Value) -> Result<Spawn, RpcError> {
    let bad = |m: &str| RpcError::new("invalid_argument", m.to_owned());
    let process = rpc::field(v, "process", "process")
        .cloned()
        .unwrap_or(json!({}));
    let pty = rpc::field(v, "pty", "pty").map(pty_size).transpose()?;
    let cmd = rpc::field(&process, "cmd", "cmd")
        .map(|c| {
            c.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad("cmd is not a string"))
        })
        .transpose()?
        .unwrap_or_default();
    let args = match rpc::field(&process, "args", "args") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad("args must be strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("args is not a list")),
    };
    let envs = match rpc::field(&process, "envs", "envs") {
        None => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_owned()))
                    .ok_or_else(|| bad("envs values must be strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("envs is not a map")),
    };
    let cwd = rpc::field(&process, "cwd", "cwd")
        .and_then(|c| c.as_str())
        .map(str::to_owned);
    let tag = rpc::field(v, "tag", "tag")
        .and_then(|t| t.as_str())
        .map(str::to_owned);
    // Absent means true (backwards compatibility), as in envd.
    let stdin = rpc::field(v, "stdin", "stdin")
        .and_then(|s| s.as_bool())
        .unwrap_or(true);
    Ok(Spawn {
        cmd,
        args,
        envs,
        cwd,
        tag,
        stdin,
        pty,
        config: process,
    })
}

/// `PTY{size{cols, rows}}` (`uint32`s, absent = 0; envd casts them to `uint16`).
fn pty_size(pty: &Value) -> Result<PtySize, RpcError> {
    let size = rpc::field(pty, "size", "size")
        .cloned()
        .unwrap_or(json!({}));
    let dim = |name: &str| -> Result<u16, RpcError> {
        Ok(rpc::int_field(&size, name, name)?.unwrap_or(0) as u16)
    };
    Ok(PtySize::new(dim("rows")?, dim("cols")?))
}

async fn spawn(
    sbx: &Arc<Sbx>,
    s: Spawn,
    user: &User,
) -> Result<(Arc<Proc>, mpsc::Receiver<Out>), RpcError> {
    let cwd = resolve(s.cwd.as_deref().unwrap_or(""), user);
    let user_cmd = std::iter::once(s.cmd.clone())
        .chain(s.args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    if s.cmd.contains('\0') || s.args.iter().any(|a| a.contains('\0')) {
        return Err(RpcError::new(
            "invalid_argument",
            format!("error starting process '{user_cmd}': argument contains a NUL byte"),
        ));
    }
    // envd (`handler.New`) runs every command through this wrapper, which sets the OOM score and
    // nice value before exec-ing it; a missing program is therefore nice's exit 127.
    let mut argv: Vec<String> = vec![
        "-c".into(),
        "echo 100 > /proc/$$/oom_score_adj && exec /usr/bin/nice -n 0 \"${@}\"".into(),
        "--".into(),
        s.cmd.clone(),
    ];
    argv.extend(s.args.iter().cloned());
    // envd: PATH from its own environment, then the user's HOME/USER/LOGNAME, then the sandbox's
    // env vars, then the request's (the last value wins).
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("PATH".into(), super::DEFAULT_PATH.into());
    env.insert("HOME".into(), sbx.sandbox.visible_path(user.home));
    env.insert("USER".into(), user.name.clone());
    env.insert("LOGNAME".into(), user.name.clone());
    env.extend(sbx.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(s.envs.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut proc = tokio::process::Command::new("/bin/sh");
    proc.args(&argv).env_clear().envs(&env).kill_on_drop(false);
    if s.pty.is_none() {
        proc.stdin(if s.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    }
    let account = sbx
        .sandbox
        .spec()
        .user_named(&user.name)
        .cloned()
        .ok_or_else(|| RpcError::new("internal", format!("no account {}", user.name)))?;
    let spawn_error = |e| match e {
        execseam_spawn::SpawnError::Workdir(_) => {
            RpcError::new("invalid_argument", format!("cwd '{cwd}' does not exist"))
        }
        execseam_spawn::SpawnError::Io(e) => match s.pty {
            // envd's `pty.StartWithSize` failure (`handler.New`).
            Some(size) => RpcError::new(
                "invalid_argument",
                format!(
                    "error starting pty with command '{user_cmd}' in dir '{cwd}' with '{}' cols and '{}' rows: {e}",
                    size.cols, size.rows
                ),
            ),
            None => RpcError::new(
                "invalid_argument",
                format!("error starting process '{user_cmd}': {e}"),
            ),
        },
    };
    let (mut child, pid, host_pid, tty) = match s.pty {
        Some(size) => {
            let p = sbx
                .sandbox
                .spawn_pty(proc, &account, &cwd, size)
                .await
                .map_err(spawn_error)?;
            (p.child, p.pid, p.host_pid, Some(p.master))
        }
        // envd gives a non-PTY process neither `Setpgid` nor `Setsid` (its `SysProcAttr` holds
        // only the credentials and the cgroup fd: e2b-dev/infra@54693ff35
        // `packages/envd/internal/services/process/handler/handler.go` lines 223-230), so it
        // stays in envd's process group; `pty.StartWithSize` (line 297) gives a PTY process a
        // session of its own (creack/pty sets `Setsid` and `Setctty`), as `spawn_pty` does.
        None => {
            let p = sbx
                .sandbox
                .spawn_in_daemon_group(proc, &account, &cwd)
                .await
                .map_err(spawn_error)?;
            (p.child, p.pid, p.host_pid, None)
        }
    };
    let p = Arc::new(Proc {
        pid,
        host_pid,
        tag: s.tag,
        config: s.config,
        stdin: tokio::sync::Mutex::new(child.stdin.take()),
        tty: Mutex::new(tty.clone()),
        subscribers: Mutex::new(Vec::new()),
        reaped: AtomicBool::new(false),
    });
    let rx = p.subscribe();
    sbx.procs.lock().expect("procs").insert(pid, p.clone());
    match tty {
        Some(master) => tokio::spawn(pump_pty(p.clone(), child, master, Arc::downgrade(sbx))),
        None => tokio::spawn(pump(p.clone(), child, Arc::downgrade(sbx))),
    };
    Ok((p, rx))
}

/// envd runs a `Start` with a `Connect-Timeout-Ms` under a context of its own (not the request's:
/// "we do not want the command to be killed if the request context is cancelled", `start.go`),
/// so the process is killed at the deadline whether or not the client still listens. envd's
/// `exec.CommandContext` kills the process itself, and so does the emulator.
fn kill_at(proc: &Arc<Proc>, deadline: Instant) {
    let proc = Arc::downgrade(proc);
    tokio::spawn(async move {
        tokio::time::sleep_until(deadline).await;
        if let Some(p) = proc.upgrade() {
            p.kill_now();
        }
    });
}

/// A response body fed from a channel (an `Err` item aborts the response: a cut stream).
struct RxBody(mpsc::Receiver<Result<Bytes, io::Error>>);

impl futures_core::Stream for RxBody {
    type Item = Result<Bytes, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

pub(crate) fn streaming(rx: mpsc::Receiver<Result<Bytes, io::Error>>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, STREAM_CT)],
        Body::from_stream(RxBody(rx)),
    )
        .into_response()
}

pub(crate) fn failed_stream(e: &RpcError) -> Response {
    rpc::stream_response(vec![end_stream(Some(e))])
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Normal,
    /// Run the command, then answer HTTP 500 (it "may have run").
    ServerError,
    Cut,
    Malformed,
    Vanish,
    Stream(StreamFault),
}

struct StreamPlan {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    sub: mpsc::Receiver<Out>,
    proc: Arc<Proc>,
    state: Arc<State>,
    sandbox_id: String,
    gone: tokio::sync::watch::Receiver<bool>,
    /// Kill the process and end with `deadline_exceeded` at this instant (Start); on Connect
    /// only the stream ends.
    deadline: Option<Instant>,
    kill_at_deadline: bool,
    keepalive: Duration,
    mode: Mode,
}

fn is_gone(gone: &tokio::sync::watch::Receiver<bool>) -> bool {
    *gone.borrow()
}

async fn run_stream(p: StreamPlan) {
    let StreamPlan {
        tx,
        mut sub,
        proc,
        state,
        sandbox_id,
        mut gone,
        deadline,
        kill_at_deadline,
        keepalive,
        mode,
    } = p;
    macro_rules! send {
        ($b:expr) => {
            if tx.send(Ok($b)).await.is_err() {
                return;
            }
        };
    }
    if let Mode::Stream(StreamFault::CutBeforeStart { .. }) = &mode {
        let _ = tx
            .send(Err(io::Error::other("stream cut by fault injection")))
            .await;
        return;
    }
    send!(message(&json!({"event": {"start": {"pid": proc.pid}}})));
    match &mode {
        Mode::Malformed => {
            send!(envelope(0, br#"{"event":{"data":{"stdout":"#));
            send!(end_stream(None));
            return;
        }
        Mode::Stream(StreamFault::Error { code, message }) => {
            send!(end_stream(Some(&RpcError::new(code, message.clone()))));
            return;
        }
        _ => {}
    }
    let vanish_at = (mode == Mode::Vanish).then(|| Instant::now() + Duration::from_millis(300));
    let lost = RpcError::new(
        "unavailable",
        format!("the connection to sandbox {sandbox_id} ended before the stream completed"),
    );
    let gone_now = gone.clone();
    let mut ping_at = Instant::now() + keepalive;
    let at = |t: Option<Instant>| async move {
        match t {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    loop {
        tokio::select! {
            () = tx.closed() => return,
            ev = sub.recv() => match ev {
                // The sandbox went away (its processes were killed after this was set).
                _ if is_gone(&gone_now) => {
                    let _ = tx.send(Ok(end_stream(Some(&lost)))).await;
                    return;
                }
                // Killed at the deadline: envd's `ctx.Done()` won (start.go), not the end
                // event (without this, a loaded scheduler could deliver the end first).
                Some(Out::End(_)) if kill_at_deadline && deadline.is_some_and(|d| Instant::now() >= d) => {
                    let e = RpcError::new("deadline_exceeded", "context deadline exceeded");
                    let _ = tx.send(Ok(end_stream(Some(&e)))).await;
                    return;
                }
                Some(Out::End(end)) => {
                    match mode {
                        Mode::Cut => {
                            let _ = tx.send(Err(io::Error::other("stream cut by fault injection"))).await;
                        }
                        Mode::Stream(StreamFault::NoEndEvent) => {
                            let _ = tx.send(Ok(end_stream(None))).await;
                        }
                        _ => {
                            send!(message(&end_json(&end)));
                            let _ = tx.send(Ok(end_stream(None))).await;
                        }
                    }
                    return;
                }
                Some(out) => {
                    if let Some(v) = data_json(&out) {
                        send!(message(&v));
                    }
                    ping_at = Instant::now() + keepalive;
                }
                None => {
                    let e = RpcError::new("unknown", "end event channel closed before sending end event");
                    let _ = tx.send(Ok(end_stream(Some(&e)))).await;
                    return;
                }
            },
            () = tokio::time::sleep_until(ping_at) => {
                send!(message(&json!({"event": {"keepalive": {}}})));
                ping_at = Instant::now() + keepalive;
            }
            () = at(deadline) => {
                if kill_at_deadline {
                    // Also killed by `kill_at`, which does not depend on this stream.
                    proc.kill_now();
                }
                let e = RpcError::new("deadline_exceeded", "context deadline exceeded");
                let _ = tx.send(Ok(end_stream(Some(&e)))).await;
                return;
            }
            () = at(vanish_at) => {
                state.kill(&sandbox_id);
                let _ = tx.send(Ok(end_stream(Some(&lost)))).await;
                return;
            }
            ok = async { gone.wait_for(|g| *g).await.is_ok() } => {
                if ok {
                    let _ = tx.send(Ok(end_stream(Some(&lost)))).await;
                }
                return;
            }
        }
    }
}

/// `Keepalive-Ping-Interval` in seconds, envd's default when absent
/// (`permissions.GetKeepAliveTicker`).
pub(crate) fn keepalive_of(req: &EnvdRequest) -> Duration {
    header_secs(req, "keepalive-ping-interval").unwrap_or(DEFAULT_KEEPALIVE)
}

fn header_secs(req: &EnvdRequest, name: &str) -> Option<Duration> {
    req.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// `Connect-Timeout-Ms`: absent or 0 is no deadline; anything unparsable is an error.
pub(crate) fn connect_timeout(req: &EnvdRequest) -> Result<Option<Duration>, RpcError> {
    match req.headers.get("connect-timeout-ms") {
        None => Ok(None),
        Some(v) => {
            let ms: u64 = v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| RpcError::new("invalid_argument", "invalid Connect-Timeout-Ms"))?;
            Ok((ms > 0).then(|| Duration::from_millis(ms)))
        }
    }
}

pub(crate) async fn read_stream_messages(req: &mut EnvdRequest) -> Result<Vec<Bytes>, Response> {
    if rpc::content_type(&req.headers) != STREAM_CT {
        return Err(rpc::unsupported_media_type(STREAM_CT));
    }
    let body = std::mem::replace(&mut req.body, Body::empty());
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| failed_stream(&RpcError::new("invalid_argument", e.to_string())))?;
    rpc::envelopes(&bytes).map_err(|e| failed_stream(&e))
}

async fn start(mut req: EnvdRequest) -> Response {
    let mut mode = match req.state.faults.take("exec") {
        None => Mode::Normal,
        Some(Fault::ServerError) => Mode::ServerError,
        Some(Fault::CutBeforeExit) => Mode::Cut,
        Some(Fault::MalformedBody) => Mode::Malformed,
        Some(Fault::SandboxVanishes) => Mode::Vanish,
        Some(f) => {
            if let Some(r) = super::edge_fault(f, req.ctl.as_ref(), Some(&req.sbx.id)).await {
                return r;
            }
            Mode::Normal
        }
    };
    let msgs = match read_stream_messages(&mut req).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let [msg] = msgs.as_slice() else {
        return failed_stream(&RpcError::new(
            "invalid_argument",
            format!("expected exactly one request message, got {}", msgs.len()),
        ));
    };
    let parsed = match rpc::parse(msg).and_then(|v| parse_start(&v)) {
        Ok(p) => p,
        Err(e) => return failed_stream(&e),
    };
    if mode == Mode::Normal {
        let mut armed = req.state.stream_faults.lock().expect("stream faults");
        let applies = match armed.front() {
            Some(StreamFault::CutBeforeStart { tag_prefix }) => parsed
                .tag
                .as_deref()
                .is_some_and(|t| t.starts_with(tag_prefix.as_str())),
            Some(_) => true,
            None => false,
        };
        if let Some(f) = applies.then(|| armed.pop_front()).flatten() {
            mode = Mode::Stream(f);
        }
    }
    let user = match user_of(&req.headers) {
        Ok(u) => u,
        Err(m) => return failed_stream(&RpcError::new("unauthenticated", m)),
    };
    let timeout = match connect_timeout(&req) {
        Ok(t) => t,
        Err(e) => return failed_stream(&e),
    };
    let (proc, mut sub) = match spawn(&req.sbx, parsed, &user).await {
        Ok(p) => p,
        Err(e) => return failed_stream(&e),
    };
    // One instant for the kill and the stream's deadline: envd's context is done before the
    // kill it causes, so the end event of a process killed at the deadline is never sent.
    let deadline = timeout.map(|t| Instant::now() + t);
    if let Some(d) = deadline {
        kill_at(&proc, d);
    }
    if mode == Mode::ServerError {
        // The command ran; the answer is lost behind an HTTP 500.
        while let Some(ev) = sub.recv().await {
            if matches!(ev, Out::End(_)) {
                break;
            }
        }
        return plain_error(StatusCode::INTERNAL_SERVER_ERROR, "internal server error");
    }
    stream_events(&req, proc, sub, deadline, true, mode)
}

/// Answers `req` with `proc`'s events from `sub` (and keepalives at the request's interval)
/// until the process ends, the sandbox goes or `deadline` passes.
fn stream_events(
    req: &EnvdRequest,
    proc: Arc<Proc>,
    sub: mpsc::Receiver<Out>,
    deadline: Option<Instant>,
    kill_at_deadline: bool,
    mode: Mode,
) -> Response {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run_stream(StreamPlan {
        tx,
        sub,
        proc,
        state: req.state.clone(),
        sandbox_id: req.sbx.id.clone(),
        gone: req.sbx.gone.subscribe(),
        deadline,
        kill_at_deadline,
        keepalive: keepalive_of(req),
        mode,
    }));
    streaming(rx)
}

fn selector(v: &Value) -> Result<Selector, RpcError> {
    let process = rpc::field(v, "process", "process")
        .ok_or_else(|| RpcError::new("invalid_argument", "invalid input type"))?;
    if let Some(pid) = rpc::int_field(process, "pid", "pid")? {
        return Ok(Selector::Pid(pid as u32));
    }
    if let Some(tag) = rpc::field(process, "tag", "tag").and_then(|t| t.as_str()) {
        return Ok(Selector::Tag(tag.to_owned()));
    }
    Err(RpcError::new("invalid_argument", "invalid input type"))
}

enum Selector {
    Pid(u32),
    Tag(String),
}

fn find(sbx: &Sbx, sel: &Selector) -> Result<Arc<Proc>, RpcError> {
    let procs = sbx.procs.lock().expect("procs");
    match sel {
        Selector::Pid(pid) => procs
            .get(pid)
            .cloned()
            .ok_or_else(|| RpcError::new("not_found", format!("process with pid {pid} not found"))),
        Selector::Tag(tag) => procs
            .values()
            .find(|p| p.tag.as_deref() == Some(tag.as_str()))
            .cloned()
            .ok_or_else(|| RpcError::new("not_found", format!("process with tag {tag} not found"))),
    }
}

async fn connect(mut req: EnvdRequest) -> Response {
    let msgs = match read_stream_messages(&mut req).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let [msg] = msgs.as_slice() else {
        return failed_stream(&RpcError::new("invalid_argument", "expected one message"));
    };
    let sel = match rpc::parse(msg).and_then(|v| selector(&v)) {
        Ok(s) => s,
        Err(e) => return failed_stream(&e),
    };
    let proc = match find(&req.sbx, &sel) {
        Ok(p) => p,
        // Ended within the retention: its start and end events (no output is kept).
        Err(e) => match retained(&req.sbx, &sel) {
            Some((pid, end)) => {
                return rpc::stream_response(vec![
                    message(&json!({"event": {"start": {"pid": pid}}})),
                    message(&end_json(&end)),
                    end_stream(None),
                ]);
            }
            None => return failed_stream(&e),
        },
    };
    let timeout = match connect_timeout(&req) {
        Ok(t) => t,
        Err(e) => return failed_stream(&e),
    };
    let sub = proc.subscribe();
    let deadline = timeout.map(|t| Instant::now() + t);
    stream_events(&req, proc, sub, deadline, false, Mode::Normal)
}

async fn write_stdin(proc: &Proc, data: &[u8]) -> Result<(), RpcError> {
    if proc.tty.lock().expect("tty").is_some() {
        return Err(RpcError::new(
            "internal",
            "error writing to stdin: tty assigned to process — input should be written to the pty, not the stdin",
        ));
    }
    let mut stdin = proc.stdin.lock().await;
    let Some(pipe) = stdin.as_mut() else {
        return Err(RpcError::new(
            "internal",
            "error writing to stdin: stdin not enabled or closed",
        ));
    };
    let r = async {
        pipe.write_all(data).await?;
        pipe.flush().await
    }
    .await;
    r.map_err(|e| {
        let why = if e.kind() == io::ErrorKind::BrokenPipe {
            "broken pipe".to_owned()
        } else {
            e.to_string()
        };
        RpcError::new(
            "internal",
            format!(
                "error writing to stdin: error writing to stdin of process '{}': write |1: {why}",
                proc.pid
            ),
        )
    })
}

/// envd's `WriteTty` (`handler.go`): typed into the process's terminal.
async fn write_tty(proc: &Proc, data: &[u8]) -> Result<(), RpcError> {
    let Some(tty) = proc.tty.lock().expect("tty").clone() else {
        return Err(RpcError::new(
            "internal",
            "error writing to tty: tty not assigned to process — input should be written to the stdin, not the tty",
        ));
    };
    tty.write_all(data).await.map_err(|e| {
        RpcError::new(
            "internal",
            format!(
                "error writing to tty: error writing to tty of process '{}': write /dev/ptmx: {e}",
                proc.pid
            ),
        )
    })
}

/// `ProcessInput`: `stdin` or `pty` bytes (base64 in JSON).
enum Input {
    Stdin(Vec<u8>),
    Pty(Vec<u8>),
}

fn input_bytes(v: &Value) -> Result<Option<Input>, RpcError> {
    let input = rpc::field(v, "input", "input")
        .ok_or_else(|| RpcError::new("invalid_argument", "invalid input type"))?;
    let decode = |name: &str, s: &Value| -> Result<Vec<u8>, RpcError> {
        let s = s
            .as_str()
            .ok_or_else(|| RpcError::new("invalid_argument", format!("{name} is not base64")))?;
        B64.decode(s)
            .map_err(|e| RpcError::new("invalid_argument", format!("{name} is not base64: {e}")))
    };
    if let Some(p) = rpc::field(input, "pty", "pty") {
        return decode("pty", p).map(|b| Some(Input::Pty(b)));
    }
    match rpc::field(input, "stdin", "stdin") {
        None => Ok(None),
        Some(s) => decode("stdin", s).map(|b| Some(Input::Stdin(b))),
    }
}

/// envd's `handleInput` (`input.go`).
async fn handle_input(proc: &Proc, input: Option<Input>) -> Result<(), RpcError> {
    match input {
        Some(Input::Stdin(b)) => write_stdin(proc, &b).await,
        Some(Input::Pty(b)) => write_tty(proc, &b).await,
        None => Ok(()),
    }
}

/// `StreamInput`: each message is handled as it arrives, as envd's `streamInputHandler` does
/// (`input.go`: `for stream.Receive()`, each `data` written to the process's stdin before the
/// next is read), so what is held is one message, never the stream ([`rpc::EnvelopeReader`];
/// the body comes through `stream_then_drain`, with no total bound).
async fn stream_input(mut req: EnvdRequest) -> Response {
    use futures_util::StreamExt as _;
    if rpc::content_type(&req.headers) != STREAM_CT {
        return rpc::unsupported_media_type(STREAM_CT);
    }
    let mut body = std::mem::replace(&mut req.body, Body::empty()).into_data_stream();
    let mut reader = rpc::EnvelopeReader::default();
    let result = async {
        let (mut proc, mut i) = (None, 0);
        loop {
            while let Some(m) = reader.next_message()? {
                let v = rpc::parse(&m)?;
                if let Some(start) = rpc::field(&v, "start", "start") {
                    proc = Some(find(&req.sbx, &selector(start)?)?);
                } else if let Some(data) = rpc::field(&v, "data", "data") {
                    let Some(p) = &proc else {
                        return Err(RpcError::new(
                            "failed_precondition",
                            "the first message must be a start event",
                        ));
                    };
                    handle_input(p, input_bytes(data)?).await?;
                } else if rpc::field(&v, "keepalive", "keepalive").is_none() {
                    return Err(RpcError::new(
                        "invalid_argument",
                        format!("message {i}: invalid input type"),
                    ));
                }
                i += 1;
            }
            match body.next().await {
                None => return reader.finish(),
                Some(Err(e)) => return Err(RpcError::new("invalid_argument", e.to_string())),
                Some(Ok(piece)) => reader.push(&piece),
            }
        }
    }
    .await;
    match result {
        Ok(()) => rpc::stream_response(vec![message(&json!({})), end_stream(None)]),
        Err(e) => failed_stream(&e),
    }
}

async fn unary(req: EnvdRequest, method: &str) -> Response {
    let body = match rpc::json_unary_body(&req.headers, req.body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let sbx = req.sbx.clone();
    let r: Result<Value, RpcError> = async {
        let v = rpc::parse(&body)?;
        match method {
            "List" => {
                let procs: Vec<Value> = sbx
                    .procs
                    .lock()
                    .expect("procs")
                    .values()
                    .map(|p| {
                        let mut o = json!({"config": p.config, "pid": p.pid});
                        if let Some(t) = &p.tag {
                            o["tag"] = json!(t);
                        }
                        o
                    })
                    .collect();
                Ok(if procs.is_empty() {
                    json!({})
                } else {
                    json!({"processes": procs})
                })
            }
            "SendInput" => {
                let p = find(&sbx, &selector(&v)?)?;
                handle_input(&p, input_bytes(&v)?).await?;
                Ok(json!({}))
            }
            "SendSignal" => {
                let p = find(&sbx, &selector(&v)?)?;
                let sig = match rpc::field(&v, "signal", "signal") {
                    Some(Value::String(s)) if s == "SIGNAL_SIGKILL" => libc::SIGKILL,
                    Some(Value::String(s)) if s == "SIGNAL_SIGTERM" => libc::SIGTERM,
                    Some(Value::Number(n)) if n.as_i64() == Some(9) => libc::SIGKILL,
                    Some(Value::Number(n)) if n.as_i64() == Some(15) => libc::SIGTERM,
                    other => {
                        let name = match other {
                            Some(Value::String(s)) => s.clone(),
                            Some(x) => x.to_string(),
                            None => "SIGNAL_UNSPECIFIED".into(),
                        };
                        return Err(RpcError::new(
                            "unimplemented",
                            format!("invalid signal: {name}"),
                        ));
                    }
                };
                p.signal(sig)
                    .map_err(|e| RpcError::new("internal", format!("error sending signal: {e}")))?;
                Ok(json!({}))
            }
            "CloseStdin" => {
                let p = find(&sbx, &selector(&v)?)?;
                if p.tty.lock().expect("tty").is_some() {
                    return Err(RpcError::new(
                        "unknown",
                        "error closing stdin: cannot close stdin for PTY process — send Ctrl+D (0x04) instead",
                    ));
                }
                if let Some(mut pipe) = p.stdin.lock().await.take() {
                    let _ = pipe.shutdown().await;
                }
                Ok(json!({}))
            }
            // envd's `Update` (`update.go`): resizes the terminal when `pty` is given, else
            // does nothing.
            "Update" => {
                let p = find(&sbx, &selector(&v)?)?;
                if let Some(pty) = rpc::field(&v, "pty", "pty") {
                    let size = pty_size(pty)?;
                    let Some(tty) = p.tty.lock().expect("tty").clone() else {
                        return Err(RpcError::new(
                            "internal",
                            "error resizing tty: tty not assigned to process",
                        ));
                    };
                    tty.resize(size).map_err(|e| {
                        RpcError::new("internal", format!("error resizing tty: {e}"))
                    })?;
                }
                Ok(json!({}))
            }
            _ => unreachable!("dispatched"),
        }
    }
    .await;
    rpc::unary_json(r)
}

/// Routes `/process.Process/<method>`.
pub(crate) async fn dispatch(req: EnvdRequest, method: String) -> Response {
    match method.as_str() {
        "Start" => start(req).await,
        "Connect" => connect(req).await,
        "StreamInput" => stream_input(req).await,
        "List" | "SendInput" | "SendSignal" | "CloseStdin" | "Update" => unary(req, &method).await,
        _ => plain_error(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_events_omit_defaults_like_protojson() {
        let ok = end_info(Ok(ExitStatus::from_raw_code(0)));
        assert_eq!(
            end_json(&ok).to_string(),
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#
        );
        let three = end_info(Ok(ExitStatus::from_raw_code(3)));
        assert_eq!(
            end_json(&three)["event"]["end"],
            json!({"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"})
        );
        let killed = end_info(Ok(ExitStatus::from_raw_signal(9)));
        assert_eq!(
            end_json(&killed)["event"]["end"],
            json!({"exitCode":-1,"status":"signal: killed","error":"signal: killed"})
        );
        assert_eq!(go_signal_name(15), "terminated");
        assert_eq!(go_signal_name(34), "signal 34");
    }

    trait FromRaw {
        fn from_raw_code(code: i32) -> Self;
        fn from_raw_signal(sig: i32) -> Self;
    }

    impl FromRaw for ExitStatus {
        fn from_raw_code(code: i32) -> Self {
            use std::os::unix::process::ExitStatusExt;
            ExitStatus::from_raw(code << 8)
        }
        fn from_raw_signal(sig: i32) -> Self {
            use std::os::unix::process::ExitStatusExt;
            ExitStatus::from_raw(sig)
        }
    }
}
