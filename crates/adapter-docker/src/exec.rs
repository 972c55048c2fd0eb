//! Commands as Docker execs: in the warm container, or in a fresh container per call.

use execseam_adapter_kit::id;
use execseam_adapter_kit::size;
use execseam_adapter_kit::{exec_span, reaper};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as EngineError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::ContainerArchiveInfoOptions;
use bytes::BytesMut;
use execseam_adapter_kit::degrade::{self, env_line};
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Event, EventStream, Exec, ExecStream, Exit, Output,
    Ownership, PartialOutput, Retry, Sandbox,
};
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use crate::PROVIDER;
use crate::client::{self, Client, LABEL_SANDBOX};
use crate::config::DockerConfig;
use crate::containers;
use crate::error::{adapter, engine, engine_hint, is_gone};
use execseam_adapter_kit::retry::Stage;

/// The variable every exec carries, with a value unique to the exec, so that a kill finds the
/// exec's processes and their children (Docker's API has no exec kill): the kit's.
pub use execseam_adapter_kit::degrade::EXEC_TAG_VAR;

/// A sandbox: the warm container (every command a Docker exec in it), or, per call, a handle
/// whose every command gets a fresh container. Cheap to clone; see the crate docs.
#[derive(Clone)]
pub struct DockerExec {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: DockerConfig,
    pub(crate) client: Arc<Client>,
    pub(crate) target: Target,
    pub(crate) ownership: Ownership,
    /// The terminals this handle started (see `terminal.rs`).
    pub(crate) terminals: execseam_adapter_kit::attached::Terminals,
    /// What the container's `execve` takes, asked once (per call: every container has the
    /// same image and ulimits).
    pub(crate) arg_max: size::ArgMax,
}

pub(crate) enum Target {
    /// The warm container's id.
    Container(String),
    /// Per call: the handle's id, the label value of its commands' containers.
    PerCall(String),
}

execseam_adapter_kit::debug_fields!(self => DockerExec {
    host: self.inner.client.host,
    mode: self.inner.config.mode,
    id: self.id(),
    owned: self.inner.ownership.owned(),
});

/// An [`Output`] with what the engine said about the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerOutput {
    /// What the command wrote and how it ended.
    pub output: Output,
    /// The engine's `State.OOMKilled` for the container, read when the exit is 137 (`None`
    /// otherwise, or when the engine did not say). The exit stays the ambiguous 137 it is: this
    /// flag is the one place the host can classify it, and only as far as the engine is right
    /// (podman 4.3 on cgroup v1 reports `false` for a kernel OOM kill; see the adapter page).
    pub oom_killed: Option<bool>,
    /// The container the command ran in (removed by now, per call).
    pub container: String,
}

impl DockerExec {
    pub(crate) fn new(
        config: DockerConfig,
        client: Arc<Client>,
        target: Target,
        ownership: Ownership,
    ) -> DockerExec {
        DockerExec {
            inner: Arc::new(Inner {
                config,
                client,
                target,
                ownership,
                terminals: Default::default(),
                arg_max: Default::default(),
            }),
        }
    }

    /// The sandbox id: the container id in warm mode, the handle's own id per call.
    pub fn id(&self) -> &str {
        match &self.inner.target {
            Target::Container(id) | Target::PerCall(id) => id,
        }
    }

    /// The warm container's id (`None` per call).
    pub fn container_id(&self) -> Option<&str> {
        match &self.inner.target {
            Target::Container(id) => Some(id),
            Target::PerCall(_) => None,
        }
    }

    /// The configuration its containers are made with (the provider's, with the spec merged).
    pub fn config(&self) -> &DockerConfig {
        &self.inner.config
    }

    /// Runs `command` like [`Exec::exec`], and also returns the engine's OOM flag.
    pub async fn exec_detailed(&self, command: Command) -> Result<DockerOutput, Error> {
        let mut run = self.start(command).await?;
        let (mut stdout, mut stderr) = (BytesMut::new(), BytesMut::new());
        loop {
            match run.next_event().await {
                Ok(Event::Stdout(b)) => stdout.extend_from_slice(&b),
                Ok(Event::Stderr(b)) => stderr.extend_from_slice(&b),
                Ok(Event::Exit(exit)) => {
                    return Ok(DockerOutput {
                        output: Output::new(stdout.freeze(), stderr.freeze(), exit),
                        oom_killed: run.oom_killed,
                        container: run.container.clone(),
                    });
                }
                Err(e) if e.partial().is_some() => return Err(e),
                Err(e) => {
                    return Err(e.with_partial(PartialOutput {
                        stdout: stdout.freeze(),
                        stderr: stderr.freeze(),
                    }));
                }
            }
        }
    }

    async fn start(&self, command: Command) -> Result<Run, Error> {
        if self.inner.ownership.is_destroyed() {
            return Err(adapter(
                ErrorKind::NotFound,
                Retry::Never,
                "exec",
                format!("sandbox {} was destroyed", self.id()),
            ));
        }
        // The engine `execve`s the argv in the container: its limit (image, `--ulimit stack`),
        // asked.
        let arg_max = &self.inner.arg_max;
        (arg_max.check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)).await?;
        let limit = arg_max.limit_or(&crate::SIZE_LIMIT);
        let docker = self.inner.client.get().await?.clone();
        let config = &self.inner.config;
        let sandbox = match &self.inner.target {
            Target::Container(id) => {
                return start_exec(&docker, config, id, command, false, &limit).await;
            }
            Target::PerCall(sandbox) => sandbox,
        };
        let labels = client::labels(config, [(&LABEL_SANDBOX.to_owned(), sandbox)]);
        let id = containers::create(&docker, config, labels).await?;
        let mut cleanup = Cleanup::new(docker.clone());
        cleanup.arm(Action::Remove(id.clone()));
        match start_exec(&docker, config, &id, command, true, &limit).await {
            Ok(mut run) => {
                // The container goes with the exec; removing it kills everything in it.
                std::mem::swap(&mut run.cleanup, &mut cleanup);
                Ok(run)
            }
            Err(e) => {
                cleanup.run_now().await;
                Err(e)
            }
        }
    }

    /// Removes the sandbox's containers: the warm one, or per call those of commands still running.
    async fn remove_containers(&self) -> Result<(), Error> {
        let docker = self.inner.client.get().await?;
        match &self.inner.target {
            Target::Container(id) => containers::destroy(docker, id).await,
            Target::PerCall(sandbox) => {
                let labels =
                    client::labels(&self.inner.config, [(&LABEL_SANDBOX.to_owned(), sandbox)]);
                for c in containers::list(docker, &labels).await? {
                    containers::destroy(docker, &c.id).await?;
                }
                Ok(())
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Target::Container(id) = &self.target else {
            return; // per call, every command's container is removed with the command
        };
        if !(self.config.destroy_on_drop && self.ownership.destroy_on_drop()) {
            return;
        }
        let (client, id) = (self.client.clone(), id.clone());
        reaper::spawn(PROVIDER, "remove the container", async move {
            containers::destroy(client.get().await?, &id).await
        });
    }
}

async fn start_exec(
    docker: &Docker,
    config: &DockerConfig,
    container: &str,
    command: Command,
    per_call: bool,
    limit: &size::SizeLimit,
) -> Result<Run, Error> {
    let tag = new_tag();
    let workdir = command
        .workdir()
        .or(config.default_workdir())
        .map(str::to_owned);
    // Env values never go into an engine request (see `degrade::env_line`): with env (the container-wide
    // env of the config, then the command's own, which overrides it), the command takes its env
    // from the first line of its stdin, so stdin is attached.
    let entries = config.env_for(command.env());
    let env_on_stdin = !entries.is_empty();
    let mut argv = command.argv().to_vec();
    let env = vec![format!("{EXEC_TAG_VAR}={tag}")];
    let mut stdin = command.stdin().clone();
    let stdin_attached = !stdin.is_empty() || env_on_stdin;
    if env_on_stdin {
        let mut b = env_line(&entries);
        b.extend_from_slice(&stdin);
        stdin = b.into();
    }
    if stdin_attached {
        argv = stdin_via_temp_file(argv, &config.temp_dir, env_on_stdin)?;
    }
    // What counts is what the engine execs: the wrapper script is one string, `Env` is the rest.
    let sent: Vec<&String> = argv.iter().chain(&env).collect();
    size::check_wire(PROVIDER, &sent, limit)?;
    let options = CreateExecOptions {
        // Without stdin attached the exec's stdin is /dev/null: EOF at once, as the contract says.
        attach_stdin: Some(stdin_attached),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        env: Some(env),
        cmd: Some(argv),
        user: config.user.clone(),
        working_dir: workdir.clone(),
        ..Default::default()
    };
    let hint = "if the container stopped by itself: does its keepalive stay up in this image?";
    let created = client::bounded(
        config.request_timeout,
        docker.create_exec(container, options),
    )
    .await
    .map_err(|e| engine_hint("create exec", Stage::Before, e, hint))?;
    let mut cleanup = Cleanup::new(docker.clone());
    if !per_call {
        cleanup.arm(Action::Kill {
            container: container.to_owned(),
            tag,
        });
    }
    // Bounded up to the upgrade, an error answer's body included (issue 38: a 503 whose body
    // stalls or trickles hung with no host deadline); the attached streams come after it.
    let started = client::bounded(
        config.request_timeout,
        docker.start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: None,
            }),
        ),
    )
    .await;
    let (output, mut input) = match started {
        Ok(StartExecResults::Attached { output, input }) => (output, input),
        Ok(StartExecResults::Detached) => {
            return Err(adapter(
                ErrorKind::Protocol,
                Retry::Unsafe,
                "start exec",
                "the engine detached an exec that was started attached",
            ));
        }
        Err(e) => {
            cleanup.run_now().await;
            return Err(engine("start exec", Stage::After, e));
        }
    };
    // Written concurrently with reading, so a command that writes before it reads cannot
    // deadlock; a command that exits without reading all of it is not an error.
    let stdin = (!stdin.is_empty()).then(|| {
        tokio::spawn(async move {
            let _ = input.write_all(&stdin).await;
            let _ = input.shutdown().await;
        })
    });
    Ok(Run {
        docker: docker.clone(),
        container: container.to_owned(),
        exec_id: created.id,
        workdir,
        per_call,
        output,
        stdin,
        stdin_attached,
        stderr_head: Vec::new(),
        held: None,
        reset_at_end: None,
        pending: None,
        cleanup,
        oom_killed: None,
        done: false,
        idle: config.idle_timeout,
        request_timeout: config.request_timeout,
    })
}

/// The argv that first stores all of stdin in a fresh file under `temp_dir` (mode 0600, as the
/// exec's user), then runs `argv` with that file as stdin, removed before it starts.
///
/// podman 4.3 loses output when an exec exits with attached stdin still unread: conmon closes
/// the attach socket, podman's read fails with ECONNRESET, and the frames still queued are
/// dropped (measured here: most runs of `echo out; echo err >&2; exit 3` with 1 byte of unread
/// stdin returned no output at all). Reading all of stdin before the command starts avoids it.
///
/// With `env_first`, the first line of stdin is [`env_line`](degrade::env_line)'s: read and evaluated before the
/// rest is stored, and the command runs under `env --` with those entries.
fn stdin_via_temp_file(
    argv: Vec<String>,
    temp_dir: &str,
    env_first: bool,
) -> Result<Vec<String>, Error> {
    let path = degrade::temp_path(temp_dir);
    let inner = Command::builder(argv).build()?;
    let opts = degrade::WrapOptions {
        stdin: degrade::StdinFrom::File(path.clone()),
        ..Default::default()
    };
    let mut run = degrade::script(&inner, &opts)?;
    let q = degrade::quote(&path);
    let status = degrade::WRAPPER_STATUS;
    let fail = |what: &str| {
        let message = format!("{}{what}", degrade::WRAPPER_MARK);
        format!(
            "{{ rm -f -- {q}; printf '%s\\n' {} >&2; exit {status}; }}",
            degrade::quote(&message)
        )
    };
    let mut prelude = String::new();
    if env_first {
        // The entries are the positional parameters after the eval: `exec env -- "$@" …`
        // (with an inner shell for a program name env would take as an assignment).
        let program = degrade::quote(inner.program()).into_owned();
        let rest: Vec<String> = inner
            .args()
            .iter()
            .map(|a| degrade::quote(a).into_owned())
            .collect();
        let rest = rest.join(" ");
        let sep = if rest.is_empty() { "" } else { " " };
        let exec = if inner.program().contains('=') {
            format!("exec env -- \"$@\" /bin/sh -c 'exec \"$0\" \"$@\"' {program}{sep}{rest}")
        } else {
            format!("exec env -- \"$@\" {program}{sep}{rest}")
        };
        // The stdin file becomes stdin as in the core wrapper, then the `env --` exec (written
        // here whole: an argument may hold a line that starts with `exec `).
        run = format!(
            "[ -r {q} ] || {}\nexec 0< {q}\nrm -f -- {q}\n{exec}",
            fail("stdin file is missing")
        );
        prelude = format!(
            "IFS= read -r __execseam_env || {}\neval \"$__execseam_env\"; unset __execseam_env\n",
            fail("cannot read the env line")
        );
    }
    Ok(vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "{prelude}(umask 077 && cat > {q}) || {}\n{run}",
            fail(&format!("cannot store stdin under {temp_dir}"))
        ),
    ])
}

// The command's env travels as one line of shell at the start of its stdin
// (`degrade::env_line`). Env values never go into an engine request: bollard logs every request
// body at DEBUG (the exec's `Env` and `Cmd` included) through `log`, whose records no library
// can filter. The attached stdin stream is not logged. The container-wide env of the config
// travels the same way (the create body carries no `Env`): bollard also logs every decoded
// answer at DEBUG, a container inspect's `Config.Env` included.

/// The line podman 4.3 appends to the stderr frames (libpod `hijackWriteError`) when its read of
/// conmon's attach socket fails with ECONNRESET: after the runtime failed to start the command,
/// and when an exec exits with attached stdin unread (frames are lost then: see
/// [`stdin_via_temp_file`]). As the last frame it is dropped after a failed start (exit 125-127)
/// and is a `Protocol` error otherwise; anywhere else it is the command's own output.
fn is_podman_attach_reset(frame: &[u8]) -> bool {
    let Some(rest) = frame.strip_prefix(b"Error: read unixpacket @->/proc/self/fd/") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && &rest[digits..] == b"/attach: read: connection reset by peer\n"
}

type Frames = Pin<Box<dyn Stream<Item = Result<LogOutput, EngineError>> + Send>>;

/// One started exec.
struct Run {
    docker: Docker,
    container: String,
    exec_id: String,
    workdir: Option<String>,
    per_call: bool,
    output: Frames,
    stdin: Option<JoinHandle<()>>,
    /// Stdin went through [`stdin_via_temp_file`]: its wrapper's own failure is an error.
    stdin_attached: bool,
    /// The first bytes of stderr, where the wrapper's failure line would be.
    stderr_head: Vec<u8>,
    /// A stderr frame held back until it is known not to be the last (see
    /// [`is_podman_attach_reset`]).
    held: Option<bytes::Bytes>,
    /// That frame, when it was the last.
    reset_at_end: Option<bytes::Bytes>,
    pending: Option<Result<LogOutput, EngineError>>,
    /// Kills the exec (warm) or removes the container (per call) unless the exec ended cleanly:
    /// on an error here, and on drop (deadline, cancel) asynchronously.
    cleanup: Cleanup,
    oom_killed: Option<bool>,
    done: bool,
    /// See [`DockerConfig::idle_timeout`].
    idle: Duration,
    /// See [`DockerConfig::request_timeout`].
    request_timeout: Duration,
}

impl Run {
    /// The next chunk, then the exit; an error ends the run (and kills what is left of it).
    async fn next_event(&mut self) -> Result<Event, Error> {
        debug_assert!(!self.done);
        let r = self.step().await;
        if r.is_err() {
            self.done = true;
            self.abort_stdin();
            self.cleanup.run_now().await;
        }
        r
    }

    async fn step(&mut self) -> Result<Event, Error> {
        loop {
            let frame = match self.pending.take() {
                Some(f) => Some(f),
                None => self.next_frame().await?,
            };
            if let Some(held) = self.held.take() {
                if frame.is_none() {
                    self.reset_at_end = Some(held);
                } else {
                    // Not the last frame: it was the command's own output.
                    self.pending = frame;
                    return Ok(self.stderr(held));
                }
            }
            match frame {
                Some(Ok(LogOutput::StdOut { message })) if !message.is_empty() => {
                    return Ok(Event::Stdout(message));
                }
                Some(Ok(LogOutput::StdErr { message })) if !message.is_empty() => {
                    if is_podman_attach_reset(&message) {
                        self.held = Some(message);
                        continue;
                    }
                    return Ok(self.stderr(message));
                }
                Some(Ok(
                    LogOutput::StdOut { .. } | LogOutput::StdErr { .. } | LogOutput::StdIn { .. },
                )) => {}
                Some(Ok(LogOutput::Console { .. })) => {
                    // bollard yields unframed bytes for a TTY stream and for a frame cut short.
                    // The exec is never a TTY: if the stream ends right after, the connection
                    // was cut mid-frame (a transport failure); bytes that go on are not frames.
                    let cut = matches!(
                        self.next_frame().await,
                        Ok(None) | Ok(Some(Err(_))) | Err(_)
                    );
                    return Err(if cut {
                        adapter(
                            ErrorKind::Unavailable,
                            Retry::Unsafe,
                            "read exec output",
                            "the connection ended inside a stdout/stderr frame",
                        )
                    } else {
                        adapter(
                            ErrorKind::Protocol,
                            Retry::Unsafe,
                            "read exec output",
                            "the exec stream is not multiplexed stdout/stderr frames",
                        )
                    });
                }
                Some(Err(e)) => return Err(engine("read exec output", Stage::After, e)),
                None => {
                    let exit = self.finish().await?;
                    self.done = true;
                    return Ok(Event::Exit(exit));
                }
            }
        }
    }

    /// The next frame of the output stream. Silence longer than the idle timeout asks the
    /// engine: a running exec is the command's silence (wait on); an exec that has ended must
    /// end its stream within a grace, or the stream is stalled (`Timeout(Request)`, `Unsafe`).
    async fn next_frame(&mut self) -> Result<Option<Result<LogOutput, EngineError>>, Error> {
        // A decode loop must not starve the runtime (a host deadline in this task).
        tokio::task::consume_budget().await;
        loop {
            if let Ok(frame) = tokio::time::timeout(self.idle, self.output.next()).await {
                return Ok(frame);
            }
            let inspect = self.docker.inspect_exec(&self.exec_id);
            let i = match client::bounded(self.request_timeout, inspect).await {
                Ok(i) => i,
                Err(e) => return Err(engine("inspect exec", Stage::After, e)),
            };
            if i.running == Some(true) {
                continue;
            }
            let grace = self.idle.min(Duration::from_secs(1));
            if let Ok(frame) = tokio::time::timeout(grace, self.output.next()).await {
                return Ok(frame);
            }
            return Err(adapter(
                ErrorKind::Timeout(execseam_core::Deadline::Request),
                Retry::Unsafe,
                "read exec output",
                format!(
                    "the exec ended but its output stream stayed silent for {} ms (a stalled connection)",
                    (self.idle + grace).as_millis()
                ),
            ));
        }
    }

    fn stderr(&mut self, chunk: bytes::Bytes) -> Event {
        let room = 512usize.saturating_sub(self.stderr_head.len());
        self.stderr_head
            .extend_from_slice(&chunk[..room.min(chunk.len())]);
        Event::Stderr(chunk)
    }

    /// The output ended: the exit code comes from exec inspect (never from a container wait
    /// status, which podman's compat layer loses under auto-remove).
    async fn finish(&mut self) -> Result<Exit, Error> {
        let code = self.wait_exit().await?;
        self.abort_stdin();
        let code = i32::try_from(code)
            .ok()
            .filter(|c| (0..=255).contains(c))
            .ok_or_else(|| {
                adapter(
                    ErrorKind::Protocol,
                    Retry::Unsafe,
                    "inspect exec",
                    format!("the engine reported exit code {code}"),
                )
            })?;
        if let Some(line) = self.reset_at_end.take() {
            // 125/126/127: the runtime could not start the command (its message came first), so
            // nothing of the command's can be missing; otherwise frames may have been lost.
            if !(125..=127).contains(&code) {
                return Err(adapter(
                    ErrorKind::Protocol,
                    Retry::Unsafe,
                    "read exec output",
                    format!(
                        "podman lost the exec's attach connection ({}); output may be missing",
                        String::from_utf8_lossy(&line).trim_end()
                    ),
                ));
            }
            tracing::debug!("dropped podman's attach-reset line after a failed start");
        }
        if self.stdin_attached && code == degrade::WRAPPER_STATUS {
            let seen = Output::new(
                bytes::Bytes::new(),
                std::mem::take(&mut self.stderr_head),
                Exit::Code(code),
            );
            degrade::check_wrapped(seen).map_err(|e| e.or_context(PROVIDER, "exec"))?;
        }
        // The runtime reports a missing workdir as 125-127 (127 for a missing one, 125 for a
        // file), like a missing program; only the container's filesystem can tell them apart.
        if (125..=127).contains(&code)
            && let Some(dir) = self.workdir.clone()
            && !self.is_dir(&dir).await?
        {
            return Err(adapter(
                ErrorKind::NotFound,
                Retry::Never,
                "exec",
                format!("workdir {dir:?} does not exist in the container"),
            ));
        }
        // A container that stopped or vanished took the command with it: not the command's exit.
        if matches!(code, 137 | 143) {
            match containers::state(&self.docker, &self.container).await? {
                None => {
                    return Err(adapter(
                        ErrorKind::NotFound,
                        Retry::Unsafe,
                        "exec",
                        "the container was removed while the command ran",
                    ));
                }
                Some(s) if !s.running => {
                    return Err(adapter(
                        ErrorKind::NotFound,
                        Retry::Unsafe,
                        "exec",
                        format!("the container stopped while the command ran (exit {code})"),
                    ));
                }
                Some(s) => self.oom_killed = s.oom_killed,
            }
        }
        if self.per_call {
            self.cleanup.run_now().await;
        }
        self.cleanup.disarm();
        Ok(Exit::Code(code))
    }

    /// Polls exec inspect until the exec is no longer running: the stream also ends when a
    /// command closes stdout and stderr and keeps running.
    async fn wait_exit(&mut self) -> Result<i64, Error> {
        let mut delay = Duration::from_millis(5);
        loop {
            let inspect = self.docker.inspect_exec(&self.exec_id);
            let i = match client::bounded(self.request_timeout, inspect).await {
                Ok(i) => i,
                Err(e) if is_gone(&e) => {
                    return Err(adapter(
                        ErrorKind::NotFound,
                        Retry::Unsafe,
                        "inspect exec",
                        "the container was removed while the command ran",
                    ));
                }
                Err(e) => return Err(engine("inspect exec", Stage::After, e)),
            };
            if i.running != Some(true) {
                return i.exit_code.ok_or_else(|| {
                    adapter(
                        ErrorKind::Protocol,
                        Retry::Unsafe,
                        "inspect exec",
                        "the exec ended without an exit code",
                    )
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    async fn is_dir(&mut self, dir: &str) -> Result<bool, Error> {
        let options = ContainerArchiveInfoOptions {
            path: dir.to_owned(),
        };
        match self
            .docker
            .get_container_archive_info(&self.container, Some(options))
            .await
        {
            // Go's os.FileMode: ModeDir is bit 31, ModeSymlink bit 27 (a link may point at one).
            Ok(stat) => Ok(stat.file_mode & (1 << 31 | 1 << 27) != 0),
            Err(EngineError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(engine("stat workdir", Stage::After, e)),
        }
    }

    fn abort_stdin(&mut self) {
        if let Some(h) = self.stdin.take() {
            h.abort();
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.abort_stdin();
    }
}

/// What to undo for an exec that did not end cleanly.
enum Action {
    /// Kill every process of the exec (by its tag) in the warm container.
    Kill { container: String, tag: String },
    /// Remove the per-call container.
    Remove(String),
}

impl Action {
    fn what(&self) -> &'static str {
        match self {
            Action::Remove(_) => "remove the per-call container",
            Action::Kill { .. } => "kill",
        }
    }

    async fn run(self, docker: Docker) -> Result<(), Error> {
        match self {
            Action::Remove(id) => containers::destroy(&docker, &id).await,
            Action::Kill { container, tag } => kill_tagged(&docker, &container, &tag)
                .await
                .map_err(|e| engine("kill", Stage::Before, e)),
        }
    }
}

async fn kill_tagged(docker: &Docker, container: &str, tag: &str) -> Result<(), EngineError> {
    let options = CreateExecOptions {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        user: Some("0".to_owned()),
        // Every process carrying the tag (the kit's kill script).
        cmd: Some(degrade::kill_argv(tag)),
        ..Default::default()
    };
    let created = docker.create_exec(container, options).await?;
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&created.id, None).await?
    {
        while output.next().await.is_some() {}
    }
    Ok(())
}

/// Runs its action on drop unless disarmed (through the kit's reaper), or when the stream's
/// kill asks for it (awaited: issue 38, D15).
struct Cleanup {
    docker: Docker,
    guard: reaper::OnDrop,
}

impl Cleanup {
    fn new(docker: Docker) -> Cleanup {
        Cleanup {
            docker,
            guard: reaper::OnDrop::new(PROVIDER),
        }
    }

    fn arm(&mut self, action: Action) {
        self.guard
            .arm(action.what(), action.run(self.docker.clone()));
    }

    fn disarm(&mut self) {
        self.guard.disarm();
    }

    /// Runs the action, waiting at most [`CLEANUP_WAIT`] for it: an engine that stalls (the
    /// kill exec's requests unanswered) must not hold the error that caused the cleanup; the
    /// action goes on in the background.
    async fn run_now(&mut self) {
        let outcome = self.guard.run_now(CLEANUP_WAIT).await;
        tracing::debug!(provider = PROVIDER, ?outcome, "clean-up after an exec");
    }
}

/// How long an error waits for its cleanup (the kill exec, the per-call removal) before it is
/// returned with the cleanup still going on.
const CLEANUP_WAIT: Duration = Duration::from_secs(5);

/// 128 bits that no other exec has.
fn new_tag() -> String {
    id::random_id(32)
}

impl Exec for DockerExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: crate::capabilities_of(self.inner.config.mode),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            self.exec_detailed(command).await.map(|d| d.output)
        })
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }

    /// Warm mode: the adapter kit's spool in the container's `/tmp` (a detached exec's output is
    /// discarded and an attached one is killed with its client; there is no exec attach), and
    /// terminals on the engine's `Tty` exec held by this handle (`terminal.rs`). Per call: none
    /// (the container is removed after each command).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        self.capabilities().processes?;
        let spool = execseam_adapter_kit::spool::Spool::new(self, Sandbox::id(self))
            .capabilities(execseam_adapter_kit::spool::SPOOLED);
        Some(Box::new(execseam_adapter_kit::attached::Attached::new(
            spool,
            self,
            self,
            &self.inner.terminals,
        )))
    }
}

execseam_adapter_kit::exec_stream_by!(DockerExec: open_stream);

impl DockerExec {
    /// The stream of `command`: its events as the attach connection reads them; dropped early, the command is killed.
    async fn open_stream(&self, command: Command) -> Result<EventStream, Error> {
        let run = self.start(command).await?;
        let kill = run.cleanup.guard.kill();
        Ok(EventStream::new(futures_util::stream::unfold(
            Some(run),
            |state| async move {
                let mut run = state?;
                let item = run.next_event().await;
                let more = !run.done;
                Some((item, more.then_some(run)))
            },
        ))
        .with_kill(kill))
    }
}

impl Sandbox for DockerExec {
    execseam_adapter_kit::accessors!(
        self => id: DockerExec::id(self),
        ownership: &self.inner.ownership,
    );

    /// Removes the container (warm), or the containers of commands still running (per call);
    /// later commands through any handle are `Err(NotFound)`.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.remove_containers())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_unique_and_hex() {
        let a = new_tag();
        let b = new_tag();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
