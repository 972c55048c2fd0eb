//! [`LocalExec`]: runs each command on this host with `tokio::process`.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, StderrGate, WrapOptions};
use execseam_core::{
    BoxFuture, Capabilities, Command, Delivery, Error, ErrorKind, Event, EventStream, Exec,
    ExecStream, Exit, Output, Ownership, Retry, Sandbox,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::LocalConfig;
use crate::error::{error, exit_of, io_error};
use crate::{LAUNCHER_MARK, PROVIDER};

const READ_CHUNK: usize = 64 * 1024;

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
/// [`LocalExec`] does this itself; runners that spawn processes on their own can call it.
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

/// Runs commands on this host. See the [crate docs](crate).
///
/// [`LocalExec::new`] runs them on the host itself (the embedded default; its [`Sandbox::id`] is
/// `host` and it cannot be destroyed). A handle from [`LocalProvider`](crate::LocalProvider) runs
/// them in a sandbox directory.
#[derive(Clone, Debug, Default)]
pub struct LocalExec {
    config: Arc<LocalConfig>,
    sandbox: Option<Arc<SandboxDir>>,
    /// The sandbox's ownership, or (on the host) one that is never owned.
    ownership: Ownership,
}

/// A local sandbox: a directory, its env, and who removes it.
#[derive(Debug)]
pub(crate) struct SandboxDir {
    pub(crate) id: String,
    pub(crate) dir: std::path::PathBuf,
    /// `<dir>/work`, the default workdir.
    pub(crate) work: String,
    pub(crate) env: std::collections::BTreeMap<String, String>,
    pub(crate) ownership: Ownership,
}

impl Drop for SandboxDir {
    fn drop(&mut self) {
        // The safety net: an owned sandbox nobody closed is removed with its last handle.
        if self.ownership.destroy_on_drop() {
            let _ = std::fs::remove_dir_all(&self.dir);
            tracing::debug!(provider = PROVIDER, sandbox = %self.id, "removed on drop");
        }
    }
}

/// Starts a command's process somewhere other than this host's own process tree and filesystem
/// (an emulator's sandbox). [`LocalExec`] prepares the process (program, arguments, environment,
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

/// The id of the host handle ([`LocalExec::new`]).
const HOST_ID: &str = "host";

impl LocalExec {
    /// An adapter with the default configuration, on the host.
    pub fn new() -> LocalExec {
        LocalExec::default()
    }

    /// An adapter with this configuration, on the host.
    pub fn with_config(config: LocalConfig) -> LocalExec {
        LocalExec {
            config: Arc::new(config),
            sandbox: None,
            ownership: Ownership::connected(),
        }
    }

    pub(crate) fn in_sandbox(config: Arc<LocalConfig>, sandbox: SandboxDir) -> LocalExec {
        LocalExec {
            config,
            ownership: sandbox.ownership.clone(),
            sandbox: Some(Arc::new(sandbox)),
        }
    }

    /// The sandbox's working directory (`None` on the host).
    pub fn workdir(&self) -> Option<&str> {
        self.sandbox.as_deref().map(|s| s.work.as_str())
    }

    /// Puts `cmd` in the sandbox: its workdir by default, the sandbox env under the command's.
    /// A destroyed sandbox is `NotFound`.
    async fn place(&self, cmd: Command) -> Result<Command, Error> {
        let Some(sbx) = self.sandbox.as_deref() else {
            return Ok(cmd);
        };
        if !tokio::fs::metadata(&sbx.work)
            .await
            .is_ok_and(|m| m.is_dir())
        {
            return Err(error(
                ErrorKind::NotFound,
                format!("sandbox {} does not exist (it was destroyed)", sbx.id),
            ));
        }
        if cmd.workdir().is_some() && sbx.env.is_empty() {
            return Ok(cmd);
        }
        let mut env = sbx.env.clone();
        env.extend(cmd.env().iter().map(|(k, v)| (k.clone(), v.clone())));
        let workdir = cmd.workdir().unwrap_or(&sbx.work).to_owned();
        cmd.into_builder()
            .clear_env()
            .envs(env)
            .workdir(workdir)
            .build()
    }

    /// The configuration.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// The capabilities this adapter reports.
    pub fn capabilities_of(config: &LocalConfig) -> Capabilities {
        Capabilities {
            workdir: if config.launcher.is_empty() {
                Delivery::Native
            } else {
                Delivery::ShellWrapped
            },
            ..crate::CAPABILITIES
        }
    }

    async fn spawn(&self, cmd: Command) -> Result<Spawned, Result<Output, Error>> {
        execseam_adapter_kit::size::check_size(PROVIDER, &cmd, &crate::size_limit())
            .map_err(Err)?;
        let cmd = &self.place(cmd).await.map_err(Err)?;
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
                        ErrorKind::NotFound,
                        format!("workdir {dir} is not a directory"),
                    )));
                }
                Err(e) => {
                    return Err(Err(error(
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
                    return Err(Err(error(ErrorKind::NotFound, why)));
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
                            ErrorKind::InvalidCommand,
                            format!("the command is too large for execve: {e}"),
                        )
                        .with_source(e)));
                    }
                    _ => {
                        return Err(Err(error(
                            ErrorKind::Internal,
                            format!("cannot start {:?}: {e}", argv[0]),
                        )
                        .with_retry(Retry::SAFE)
                        .with_source(e)));
                    }
                };
                let msg = format!("execseam-local: {}: {why}\n", argv[0]);
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
            tracing::debug!(provider = PROVIDER, pgid, "killed the process group");
        }
    }
}

async fn read_some<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
    r.read_buf(buf).await
}

impl Exec for LocalExec {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        LocalExec::capabilities_of(&self.config)
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let span = tracing::debug_span!("exec", provider = self.provider(), operation = "exec", tool = %command.tool());
        let fut = Box::pin(async move {
            tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
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
                        out_open = r.map_err(|e| io_error("reading stdout", e))? > 0;
                    }
                    r = read_some(&mut s.stderr, &mut err), if err_open => {
                        err_open = r.map_err(|e| io_error("reading stderr", e))? > 0;
                    }
                    st = s.child.wait(), if status.is_none() => {
                        status = Some(st.map_err(|e| io_error("waiting for the command", e))?);
                        s.guard.disarm();
                        drain_until = Some(Instant::now() + self.config.drain_timeout);
                    }
                    () = drain => break,
                }
            }
            let exit = exit_of(status.expect("loop ends after the exit"))?;
            tracing::debug!(provider = PROVIDER, ?exit, "exited");
            let output = Output::new(out, err, exit);
            if s.launched {
                launcher_wrap()
                    .check(output)
                    .map_err(|e| e.with_provider(PROVIDER))
            } else {
                Ok(output)
            }
        });
        // One span per exec: the provider, the operation and the tool, never argv, env or stdin.
        Box::pin(tracing::Instrument::instrument(fut, span))
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }

    /// The adapter kit's spool, on this host: a sandbox's spools are in its directory
    /// (`<sandbox>/processes`), the host's in `<temp dir>/execseam-processes-<uid>`; with a
    /// launcher, where the launched commands see `/tmp`. A started command outlives the
    /// `execseam` process that started it (its supervisor is in a session of its own).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        let root = match (&self.sandbox, self.config.launcher.is_empty()) {
            (Some(s), true) => s.dir.join("processes").to_string_lossy().into_owned(),
            (None, true) => {
                // SAFETY: getuid has no preconditions and cannot fail.
                let uid = unsafe { libc::getuid() };
                std::env::temp_dir()
                    .join(format!("execseam-processes-{uid}"))
                    .to_string_lossy()
                    .into_owned()
            }
            (_, false) => execseam_adapter_kit::spool::DEFAULT_ROOT.to_owned(),
        };
        Some(Box::new(
            execseam_adapter_kit::spool::Spool::new(self, Sandbox::id(self)).root(root),
        ))
    }
}

impl ExecStream for LocalExec {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        let span = tracing::debug_span!("exec", provider = self.provider(), operation = "exec_stream", tool = %command.tool());
        let fut = Box::pin(async move {
            tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec_stream");
            let (tx, rx) = mpsc::channel(32);
            match self.spawn(command).await {
                Ok(s) => {
                    tokio::spawn(drive(s, tx, self.config.drain_timeout));
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
        });
        // One span per exec: the provider, the operation and the tool, never argv, env or stdin.
        Box::pin(tracing::Instrument::instrument(fut, span))
    }
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

async fn drive(mut s: Spawned, tx: mpsc::Sender<Result<Event, Error>>, drain: Duration) {
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
                Err(e) => Some(Err(io_error("reading stdout", e))),
            },
            r = read_some(&mut s.stderr, &mut err_buf), if err_open => match r {
                Ok(0) => { err_open = false; None }
                Ok(_) => held.push(Bytes::from(std::mem::take(&mut err_buf))).map(|b| Ok(Event::Stderr(b))),
                Err(e) => Some(Err(io_error("reading stderr", e))),
            },
            st = s.child.wait(), if status.is_none() => {
                match st {
                    Ok(st) => {
                        status = Some(st);
                        s.guard.disarm();
                        drain_until = Some(Instant::now() + drain);
                        None
                    }
                    Err(e) => Some(Err(io_error("waiting for the command", e))),
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
    let exit = match exit_of(status.expect("loop ends after the exit")) {
        Ok(exit) => exit,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    if s.launched {
        match launcher_wrap().check(held.finish(exit)) {
            Err(e) => {
                let _ = tx.send(Err(e.with_provider(PROVIDER))).await;
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

impl Sandbox for LocalExec {
    fn id(&self) -> &str {
        self.sandbox.as_deref().map_or(HOST_ID, |s| s.id.as_str())
    }

    fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    /// Removes the sandbox directory; the host is not a sandbox and cannot be destroyed.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let Some(s) = self.sandbox.as_deref() else {
                return Err(Error::unsupported(
                    "the host is not a sandbox: it cannot be destroyed",
                )
                .with_provider(PROVIDER)
                .with_operation("destroy"));
            };
            crate::provider::remove(&s.dir).await?;
            tracing::debug!(provider = PROVIDER, sandbox = %s.id, "destroyed");
            Ok(())
        })
    }
}
