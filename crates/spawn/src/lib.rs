#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! How execseam runs a command as a process of this host (or of an emulator's sandbox, through a
//! [`Spawner`]): the one process runner the local adapter (`execseam-local`) and the emulators'
//! sandboxes (`execseam-emulator-kit`) share.
//!
//! - **argv** is passed to `execve` exactly; there is no shell.
//! - **workdir** must exist: a missing one is `Err(NotFound)`, before anything is spawned.
//! - **env**: every command starts from an environment built from scratch, never the host's whole
//!   environment: the variables named by [`ProcessConfig::inherit`] are copied from this process
//!   when set, then [`ProcessConfig::base_env`], then the command's own on top. `PATH` falls back
//!   to `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`.
//! - **stdin**: the command's bytes; empty stdin is `/dev/null` (immediate EOF), never inherited.
//! - **stdout and stderr** are drained concurrently, so neither pipe can fill and deadlock.
//! - Each command leads its own **process group**. Dropping the exec future or the event stream
//!   before the exit (a deadline, a cancel) SIGKILLs the whole group. After the command exits, its
//!   pipes are drained for at most [`ProcessConfig::drain_timeout`] (a background child may hold
//!   them open); background processes are not killed after a normal exit.
//! - A program that cannot be found gives `Exit::Code(127)` and one that cannot be executed
//!   `Exit::Code(126)`, each with a message on stderr, as every POSIX shell reports them. A signal
//!   death is `Exit::Signal(n)`.
//! - With a [`launcher`](ProcessConfig::launcher), the command runs as `launcher… /bin/sh -c
//!   <wrapper>` and the workdir is entered by the wrapper inside the launcher's view of the
//!   filesystem. The wrapper marks its own failures with [`LAUNCHER_MARK`].
//! - With a [`spawner`](ProcessConfig::spawner) (the emulators' sandboxes), the prepared process is
//!   started by the [`Spawner`] (inside the sandbox's namespaces, as its user), which also checks
//!   and enters the workdir; everything else (pipes, process group, kills, exit) is as above.
#![warn(missing_docs)]
// Killing a process group and resetting signal dispositions need libc; they are the only unsafe
// code in the crate.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, StderrGate, WrapOptions};
use execseam_core::{
    BoxFuture, Capabilities, Command, Delivery, Error, ErrorKind, Event, EventStream, Exec,
    ExecStream, Exit, Output, Retry,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

const READ_CHUNK: usize = 64 * 1024;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a process runner does without a launcher (with one, the workdir is shell-wrapped).
pub const CAPABILITIES: Capabilities = Capabilities::FULL;

/// The marker of the launcher's own wrapper failures (a missing workdir, a failed set-up step of
/// the launcher). It differs from [`execseam_adapter_kit::degrade::WRAPPER_MARK`] so that a command
/// which an adapter wrapped itself, and whose wrapper failed, reaches the caller as that command's
/// output.
pub const LAUNCHER_MARK: &str = "execseam-launcher: ";

/// The largest command (argv and env) this host's `execve` takes, checked before anything is
/// spawned: 128 KiB per string, and the kernel's `ARG_MAX` (`sysconf(_SC_ARG_MAX)`, a quarter
/// of the stack limit) less 64 KiB for the inherited variables (`PATH`, `HOME`, …).
pub fn size_limit() -> execseam_adapter_kit::size::SizeLimit {
    // SAFETY: sysconf has no memory-safety preconditions.
    let arg_max = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    let arg_max = usize::try_from(arg_max).unwrap_or(2 << 20);
    execseam_adapter_kit::size::SizeLimit::execve(
        arg_max.saturating_sub(64 << 10),
        "this host's execve: 128 KiB per string, ARG_MAX less 64 KiB in all",
    )
}

/// The signals this process ignores (`SIG_IGN`), which a child would inherit through `exec`.
fn ignored_signals() -> &'static [i32] {
    static IGNORED: std::sync::OnceLock<Vec<i32>> = std::sync::OnceLock::new();
    IGNORED.get_or_init(|| {
        (1..32)
            // SIGPIPE: Rust's runtime ignores it in every Rust program, and std's spawn resets
            // it to the default in the child itself (on the fast, posix_spawn path); counting
            // it would put every spawn of a Rust host on the slow fork path (2-3 ms here).
            .filter(|&sig| sig != libc::SIGKILL && sig != libc::SIGSTOP && sig != libc::SIGPIPE)
            .filter(|&sig| {
                // SAFETY: a query (null new action) into a zeroed, properly sized struct.
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                        && old.sa_sigaction == libc::SIG_IGN
                }
            })
            .collect()
    })
}

/// Makes `cmd` start with every signal at its default disposition.
///
/// An ignored signal survives `exec`: under `nohup`, or started in the background by a
/// non-interactive shell, this process ignores SIGHUP or SIGINT, and so would every command it
/// runs (`kill -INT` would then not stop them). A sandbox's command starts like a fresh process.
/// Costs nothing when no signal is ignored (the spawn stays on the fast path).
/// [`ProcessExec`] does this itself; runners that spawn processes on their own can call it.
pub fn restore_default_signals(cmd: &mut tokio::process::Command) {
    let ignored = ignored_signals();
    if ignored.is_empty() {
        return;
    }
    // SAFETY: the closure only calls signal(2), which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for &sig in ignored {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// Starts a command's process somewhere other than this host's own process tree and filesystem
/// (an emulator's sandbox). [`ProcessExec`] prepares the process (program, arguments, environment,
/// stdio, its own process group, default signal dispositions, kill on drop); the spawner starts it
/// with `workdir` (a path as the sandbox sees it) as its working directory.
pub trait Spawner: Send + Sync + 'static {
    /// Starts `command` in `workdir` (`None`: the spawner's default).
    fn spawn(
        &self,
        command: tokio::process::Command,
        workdir: Option<String>,
    ) -> BoxFuture<'static, Result<tokio::process::Child, SpawnError>>;
}

/// Why a [`Spawner`] could not start a process.
#[derive(Debug)]
pub enum SpawnError {
    /// The workdir does not exist, or is not a directory, where the command runs: `NotFound`.
    Workdir(String),
    /// Starting failed; a missing program (`NotFound`) or one that cannot be executed
    /// (`PermissionDenied`) is the command's result (127 or 126), anything else an `Internal`
    /// error.
    Io(std::io::Error),
}

/// What every command's environment starts from, an optional launcher or spawner, and how long
/// pipes are drained after an exit. The defaults suit running commands on this host.
#[derive(Clone)]
pub struct ProcessConfig {
    inherit: Vec<String>,
    base_env: BTreeMap<String, String>,
    launcher: Vec<String>,
    spawner: Option<Arc<dyn Spawner>>,
    drain_timeout: Duration,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            inherit: ["PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR"]
                .map(String::from)
                .to_vec(),
            base_env: BTreeMap::new(),
            launcher: Vec::new(),
            spawner: None,
            drain_timeout: Duration::from_secs(1),
        }
    }
}

impl std::fmt::Debug for ProcessConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessConfig")
            .field("inherit", &self.inherit)
            .field("base_env", &self.base_env.keys().collect::<Vec<_>>())
            .field("launcher", &self.launcher)
            .field("spawner", &self.spawner.as_ref().map(|_| "set"))
            .field("drain_timeout", &self.drain_timeout)
            .finish()
    }
}

impl ProcessConfig {
    /// The defaults.
    pub fn new() -> ProcessConfig {
        ProcessConfig::default()
    }

    /// The host variables copied into every command's environment (replaces the default list).
    #[must_use]
    pub fn inherit<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.inherit = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Variables set in every command's environment, after the inherited ones.
    #[must_use]
    pub fn base_env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.base_env = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// An argv prefix every command runs under (for example `unshare --mount … --`); the command
    /// itself becomes `/bin/sh -c <wrapper>` so its workdir is entered inside the launcher.
    #[must_use]
    pub fn launcher<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.launcher = argv.into_iter().map(Into::into).collect();
        self
    }

    /// The argv prefix set by [`launcher`](Self::launcher) (empty when commands run directly):
    /// for emulators that spawn processes themselves (interactive stdin, signals) in the same
    /// sandbox view.
    pub fn launcher_argv(&self) -> &[String] {
        &self.launcher
    }

    /// Starts every command through `spawner` (an emulator's sandbox) instead of on this host;
    /// the workdir is then checked and entered by the spawner, natively.
    #[must_use]
    pub fn spawner(mut self, spawner: Arc<dyn Spawner>) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// How long to keep reading a command's pipes after it exited (default 1 s).
    #[must_use]
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// The environment a command with an empty [`Command::env`] starts with.
    pub fn environment(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for key in &self.inherit {
            if let Some(v) = std::env::var_os(key).and_then(|v| v.into_string().ok()) {
                env.insert(key.clone(), v);
            }
        }
        env.entry("PATH".to_owned())
            .or_insert_with(|| DEFAULT_PATH.to_owned());
        env.extend(self.base_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    /// The capabilities of a runner with this configuration.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            workdir: if self.launcher.is_empty() {
                Delivery::Native
            } else {
                Delivery::ShellWrapped
            },
            ..CAPABILITIES
        }
    }
}

/// Runs commands as processes ([crate docs](crate)), naming `provider` in its errors and spans.
#[derive(Clone, Debug)]
pub struct ProcessExec {
    config: Arc<ProcessConfig>,
    provider: &'static str,
}

impl ProcessExec {
    /// A runner with `config`; its errors and spans name `provider`.
    pub fn new(config: ProcessConfig, provider: &'static str) -> ProcessExec {
        ProcessExec {
            config: Arc::new(config),
            provider,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    async fn spawn(&self, cmd: Command) -> Result<Spawned, Result<Output, Error>> {
        let provider = self.provider;
        execseam_adapter_kit::size::check_size(provider, &cmd, &size_limit()).map_err(Err)?;
        let cmd = &cmd;
        let launched = !self.config.launcher.is_empty();
        let argv: Vec<String> = if launched {
            let mut argv = self.config.launcher.clone();
            argv.extend(degrade::wrap(cmd, &launcher_wrap()).map_err(Err)?);
            argv
        } else {
            cmd.argv().to_vec()
        };
        let mut proc = tokio::process::Command::new(&argv[0]);
        proc.args(&argv[1..])
            .env_clear()
            .envs(self.config.environment())
            .envs(cmd.env())
            .stdin(if cmd.stdin().is_empty() {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        restore_default_signals(&mut proc);
        let spawner = self.config.spawner.is_some();
        if let (false, false, Some(dir)) = (launched, spawner, cmd.workdir()) {
            match tokio::fs::metadata(dir).await {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Err(error(
                        provider,
                        ErrorKind::NotFound,
                        format!("workdir {dir} is not a directory"),
                    )));
                }
                Err(e) => {
                    return Err(Err(error(
                        provider,
                        ErrorKind::NotFound,
                        format!("workdir {dir} does not exist: {e}"),
                    )));
                }
            }
            proc.current_dir(dir);
        }
        let spawned = match &self.config.spawner {
            Some(spawner) => match spawner.spawn(proc, cmd.workdir().map(str::to_owned)).await {
                Ok(c) => Ok(c),
                Err(SpawnError::Workdir(why)) => {
                    return Err(Err(error(provider, ErrorKind::NotFound, why)));
                }
                Err(SpawnError::Io(e)) => Err(e),
            },
            None => proc.spawn(),
        };
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                // What a shell would report: the command ran and failed, it is not an infra error.
                let (code, why) = match e.kind() {
                    std::io::ErrorKind::NotFound => (127, "command not found"),
                    std::io::ErrorKind::PermissionDenied => (126, "permission denied"),
                    // Deterministic: retrying fails the same way.
                    _ if e.raw_os_error() == Some(libc::E2BIG) => {
                        return Err(Err(error(
                            provider,
                            ErrorKind::InvalidCommand,
                            format!("the command is too large for execve: {e}"),
                        )
                        .with_source(e)));
                    }
                    _ => {
                        return Err(Err(error(
                            provider,
                            ErrorKind::Internal,
                            format!("cannot start {:?}: {e}", argv[0]),
                        )
                        .with_retry(Retry::SAFE)
                        .with_source(e)));
                    }
                };
                let msg = format!("execseam-{provider}: {}: {why}\n", argv[0]);
                return Err(Ok(Output::new(Bytes::new(), msg, Exit::Code(code))));
            }
        };
        let guard = GroupKill::new(child.id());
        if let Some(mut stdin) = child.stdin.take() {
            let data = cmd.stdin().clone();
            // A command that exits without reading its stdin makes this fail with EPIPE: fine.
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
            });
        }
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        Ok(Spawned {
            child,
            stdout,
            stderr,
            guard,
            launched,
        })
    }

    /// Runs `command` to its end (what [`Exec::exec`] does, without its span).
    pub async fn run(&self, command: Command) -> Result<Output, Error> {
        let provider = self.provider;
        let mut s = match self.spawn(command).await {
            Ok(s) => s,
            Err(done) => return done,
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut out_open, mut err_open) = (true, true);
        let mut status = None;
        let mut drain_until = None;
        while out_open || err_open || status.is_none() {
            let drain = async {
                match drain_until {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = read_some(&mut s.stdout, &mut out), if out_open => {
                    out_open = r.map_err(|e| io_error(provider, "reading stdout", e))? > 0;
                }
                r = read_some(&mut s.stderr, &mut err), if err_open => {
                    err_open = r.map_err(|e| io_error(provider, "reading stderr", e))? > 0;
                }
                st = s.child.wait(), if status.is_none() => {
                    status = Some(st.map_err(|e| io_error(provider, "waiting for the command", e))?);
                    s.guard.disarm();
                    drain_until = Some(Instant::now() + self.config.drain_timeout);
                }
                () = drain => break,
            }
        }
        let exit = exit_of(provider, status.expect("loop ends after the exit"))?;
        tracing::debug!(provider, ?exit, "exited");
        let output = Output::new(out, err, exit);
        if s.launched {
            launcher_wrap()
                .check(output)
                .map_err(|e| e.with_provider(provider))
        } else {
            Ok(output)
        }
    }

    /// Starts `command` and returns its events (what [`ExecStream::exec_stream`] does, without
    /// its span).
    pub async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
        let (tx, rx) = mpsc::channel(32);
        match self.spawn(command).await {
            Ok(s) => {
                tokio::spawn(drive(s, tx, self.config.drain_timeout, self.provider));
            }
            Err(Ok(output)) => {
                // Not found / not executable: the same answer as `exec`, as events.
                for ev in [
                    Event::Stdout(output.stdout),
                    Event::Stderr(output.stderr),
                    Event::Exit(output.exit),
                ] {
                    let _ = tx.try_send(Ok(ev));
                }
            }
            Err(Err(e)) => return Err(e),
        }
        Ok(EventStream::new(Receiver(rx)))
    }
}

impl Exec for ProcessExec {
    fn provider(&self) -> &str {
        self.provider
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let span = tracing::debug_span!("exec", provider = self.provider, operation = "exec", tool = %command.tool());
        tracing::debug!(provider = self.provider, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
        // One span per exec: the provider, the operation and the tool, never argv, env or stdin.
        Box::pin(tracing::Instrument::instrument(self.run(command), span))
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }
}

impl ExecStream for ProcessExec {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        let span = tracing::debug_span!("exec", provider = self.provider, operation = "exec_stream", tool = %command.tool());
        tracing::debug!(provider = self.provider, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec_stream");
        Box::pin(tracing::Instrument::instrument(
            self.run_stream(command),
            span,
        ))
    }
}

fn error(provider: &'static str, kind: ErrorKind, message: impl Into<String>) -> Error {
    Error::new(kind, message)
        .with_provider(provider)
        .with_operation("exec")
}

fn exit_of(provider: &'static str, status: ExitStatus) -> Result<Exit, Error> {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        Ok(Exit::Code(code))
    } else if let Some(sig) = status.signal() {
        Ok(Exit::Signal(sig))
    } else {
        Err(
            Error::protocol(format!("unrecognised exit status {status:?}"))
                .with_provider(provider)
                .with_operation("exec"),
        )
    }
}

fn io_error(provider: &'static str, what: &str, e: std::io::Error) -> Error {
    error(provider, ErrorKind::Internal, format!("{what}: {e}"))
        .with_retry(Retry::Unsafe)
        .with_source(e)
}

struct Spawned {
    child: tokio::process::Child,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    guard: GroupKill,
    launched: bool,
}

/// SIGKILLs a process group on drop unless disarmed (the leader was reaped, so the id may be
/// reused and must not be signalled any more).
struct GroupKill(Option<i32>);

impl GroupKill {
    fn new(pid: Option<u32>) -> GroupKill {
        GroupKill(pid.and_then(|p| i32::try_from(p).ok()))
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) has no memory-safety preconditions; the group is ours and its leader
            // has not been reaped yet, so the id cannot have been reused.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            tracing::debug!(pgid, "killed the process group");
        }
    }
}

async fn read_some<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
    r.read_buf(buf).await
}

struct Receiver(mpsc::Receiver<Result<Event, Error>>);

impl futures_core::Stream for Receiver {
    type Item = Result<Event, Error>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// The launcher's wrapper: the workdir (the launcher cannot `chdir` for us), with the launcher's
/// own marker so that a wrapped command's own wrapper failure stays the command's output.
fn launcher_wrap() -> WrapOptions {
    WrapOptions {
        workdir: true,
        marker: LAUNCHER_MARK,
        ..WrapOptions::default()
    }
}

async fn drive(
    mut s: Spawned,
    tx: mpsc::Sender<Result<Event, Error>>,
    drain: Duration,
    provider: &'static str,
) {
    // Holds back stderr while it may still be the launcher wrapper's own failure.
    let mut held = if s.launched {
        StderrGate::new(&launcher_wrap())
    } else {
        StderrGate::open()
    };
    let (mut out_open, mut err_open) = (true, true);
    let mut status = None;
    let mut drain_until = None;
    let (mut out_buf, mut err_buf) = (Vec::new(), Vec::new());
    while out_open || err_open || status.is_none() {
        let drain_sleep = async {
            match drain_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            r = read_some(&mut s.stdout, &mut out_buf), if out_open => match r {
                Ok(0) => { out_open = false; None }
                Ok(_) => Some(Ok(Event::Stdout(Bytes::from(std::mem::take(&mut out_buf))))),
                Err(e) => Some(Err(io_error(provider, "reading stdout", e))),
            },
            r = read_some(&mut s.stderr, &mut err_buf), if err_open => match r {
                Ok(0) => { err_open = false; None }
                Ok(_) => held.push(Bytes::from(std::mem::take(&mut err_buf))).map(|b| Ok(Event::Stderr(b))),
                Err(e) => Some(Err(io_error(provider, "reading stderr", e))),
            },
            st = s.child.wait(), if status.is_none() => {
                match st {
                    Ok(st) => {
                        status = Some(st);
                        s.guard.disarm();
                        drain_until = Some(Instant::now() + drain);
                        None
                    }
                    Err(e) => Some(Err(io_error(provider, "waiting for the command", e))),
                }
            }
            () = drain_sleep => break,
            // The consumer dropped the stream: returning drops the guard, which kills the group.
            () = tx.closed() => return,
        };
        if let Some(ev) = event {
            let failed = ev.is_err();
            if tx.send(ev).await.is_err() || failed {
                return;
            }
        }
    }
    let exit = match exit_of(provider, status.expect("loop ends after the exit")) {
        Ok(exit) => exit,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    if s.launched {
        match launcher_wrap().check(held.finish(exit)) {
            Err(e) => {
                let _ = tx.send(Err(e.with_provider(provider))).await;
                return;
            }
            Ok(o) if !o.stderr.is_empty() => {
                if tx.send(Ok(Event::Stderr(o.stderr))).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
        }
    }
    let _ = tx.send(Ok(Event::Exit(exit))).await;
}
