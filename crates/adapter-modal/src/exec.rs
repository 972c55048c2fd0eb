//! [`ModalExec`]: sandbox lifecycle and the [`Exec`] / [`ExecStream`] implementation.
//!
//! One exec is: `TaskExecStart{command_args, workdir, secret_sources: [env], stdout PIPE,
//! stderr PIPE}` → stdin through `TaskExecStdinWrite` by offset, always closed with `eof` (an
//! exec without stdin sees EOF at once) → `TaskExecStdioRead` for stdout and stderr at once,
//! each reopened from its byte offset after a transient failure → `TaskExecWait` (`code`, or
//! `signal` reported as [`Exit::Signal`]). All of it after the start runs concurrently.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use execseam_adapter_kit::exec_by::ChannelEvents;
use execseam_core::{
    BoxFuture, Command, Deadline, Error, ErrorKind, Event, EventStream, Exec, Exit, Ownership,
    Retry, Sandbox,
};
use tokio::sync::{OnceCell, mpsc};
use tonic::{Code, Status};

use crate::client::{AccessTarget, Control, Router, uuid4};
use crate::config::ModalConfig;
use crate::error::{self, from_status, protocol};
use crate::wire::{api, tcr};
use crate::{CAPABILITIES, PROVIDER};
use execseam_adapter_kit::retry::Stage;

/// The stdin bytes per `TaskExecStdinWrite` (the client buffers up to 16 MiB per drain).
const STDIN_CHUNK: usize = 4 * 1024 * 1024;

/// True for an id of the V1 shape: `sb-` and 22 of `[0-9A-Za-z]`
/// (`modal/sandbox/_common.py` `_is_v1_sandbox_id`); every other id is V2.
pub fn is_v1_sandbox_id(id: &str) -> bool {
    match id.split_once('-') {
        Some(("sb", rest)) => rest.len() == 22 && rest.bytes().all(|b| b.is_ascii_alphanumeric()),
        _ => false,
    }
}

struct Inner {
    config: Arc<ModalConfig>,
    control: Arc<Control>,
    sandbox_id: String,
    v2: bool,
    task_id: OnceCell<String>,
    first_access: Mutex<Option<api::CommandRouterAccess>>,
    router: OnceCell<Arc<Router>>,
    ownership: Ownership,
    /// What the container's `execve` takes, asked for the first large command.
    arg_max: execseam_adapter_kit::size::ArgMax,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !(self.config.terminate_on_drop && self.ownership.destroy_on_drop()) {
            return;
        }
        let (control, id, v2) = (self.control.clone(), self.sandbox_id.clone(), self.v2);
        execseam_adapter_kit::reaper::spawn(PROVIDER, "terminate the sandbox", async move {
            control.terminate(&id, v2).await.map_err(|s| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("{:?}: {}", s.code(), s.message()),
                )
                .with_provider(PROVIDER)
            })
        });
    }
}

/// Commands in one Modal sandbox: [`Exec`], [`ExecStream`] and [`Sandbox`]. Cheap to clone
/// (clones share the handle's ownership). Made by [`ModalProvider`](crate::ModalProvider).
#[derive(Clone)]
pub struct ModalExec {
    inner: Arc<Inner>,
}

execseam_adapter_kit::debug_fields!(self => ModalExec {
    sandbox_id: self.inner.sandbox_id,
    task_id: self.inner.task_id.get(),
    owned: self.inner.ownership.owned(),
});

/// A finished sandbox (no task, or router access refused as FAILED_PRECONDITION) can never run
/// a command: `NotFound` (the V2 client turns the latter into `NotFoundError`,
/// `sandbox/_impl_v2.py` `_open_command_router_client`).
fn finished_or(s: Status, op: &'static str) -> Error {
    if s.code() == Code::FailedPrecondition && error::origin(&s) == error::Origin::Peer {
        Error::new(ErrorKind::NotFound, s.message().to_owned())
            .with_retry(Retry::Never)
            .with_provider(PROVIDER)
            .with_operation(op)
    } else {
        from_status(s, op, Stage::Before)
    }
}

impl ModalExec {
    fn build(
        config: Arc<ModalConfig>,
        control: Arc<Control>,
        sandbox_id: String,
        ownership: Ownership,
    ) -> ModalExec {
        ModalExec {
            inner: Arc::new(Inner {
                v2: !is_v1_sandbox_id(&sandbox_id),
                config,
                control,
                sandbox_id,
                task_id: OnceCell::new(),
                first_access: Mutex::new(None),
                router: OnceCell::new(),
                ownership,
                arg_max: execseam_adapter_kit::size::ArgMax::new(),
            }),
        }
    }

    pub(crate) fn created(
        config: Arc<ModalConfig>,
        control: Arc<Control>,
        created: api::SandboxCreateV2Response,
    ) -> ModalExec {
        let exec = ModalExec::build(config, control, created.sandbox_id, Ownership::created());
        if !created.task_id.is_empty() {
            let _ = exec.inner.task_id.set(created.task_id);
        }
        *exec.inner.first_access.lock().expect("access") = created.command_router_access;
        exec
    }

    pub(crate) fn attached(config: Arc<ModalConfig>, control: Arc<Control>, id: &str) -> ModalExec {
        ModalExec::build(config, control, id.to_owned(), Ownership::connected())
    }

    /// The sandbox id.
    pub fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    /// The task id, once known.
    pub fn task_id(&self) -> Option<&str> {
        self.inner.task_id.get().map(String::as_str)
    }

    /// The configuration.
    pub fn config(&self) -> &ModalConfig {
        &self.inner.config
    }

    /// The sandbox's result once it has finished (`SandboxWait` with timeout 0; the client's
    /// `Sandbox.poll`), `None` while it runs.
    pub async fn poll(&self) -> Result<Option<api::GenericResult>, Error> {
        self.inner
            .control
            .wait(&self.inner.sandbox_id, self.inner.v2, 0.0)
            .await
            .map_err(|s| from_status(s, "poll", Stage::Before))
    }

    /// `TaskSnapshotFilesystem` (the client's `snapshot_filesystem`, `sandbox/_common.py`
    /// `snapshot_filesystem_via_tcr`): the filesystem as a new image, kept for `ttl` (`None`:
    /// indefinitely, the wire's `-1`); the image id.
    pub async fn snapshot_filesystem(&self, ttl: Option<Duration>) -> Result<String, Error> {
        const OP: &str = "snapshot";
        let router = self.router(OP).await?;
        let req = tcr::TaskSnapshotFilesystemRequest {
            task_id: self.task_id().unwrap_or_default().to_owned(),
            snapshot_id: uuid4(),
            ttl_seconds: Some(ttl.map_or(-1, |t| i64::try_from(t.as_secs()).unwrap_or(i64::MAX))),
            ..Default::default()
        };
        // The client's default timeout; nothing is changed in the sandbox, so a lost answer
        // leaves at most an unused image.
        let image_id = router
            .snapshot_filesystem(req, Duration::from_secs(55))
            .await
            .map_err(|s| finished_or(s, OP))?;
        if image_id.is_empty() {
            return Err(protocol(OP, "TaskSnapshotFilesystem returned no image_id"));
        }
        Ok(image_id)
    }

    pub(crate) async fn router(&self, op: &'static str) -> Result<Arc<Router>, Error> {
        let inner = &self.inner;
        let task_id = inner
            .task_id
            .get_or_try_init(|| async {
                inner
                    .control
                    .task_id(&inner.sandbox_id, inner.v2)
                    .await
                    .map_err(|s| finished_or(s, op))
            })
            .await?
            .clone();
        inner
            .router
            .get_or_try_init(|| async {
                let target = if inner.v2 {
                    AccessTarget::Sandbox(inner.sandbox_id.clone())
                } else {
                    AccessTarget::Task(task_id.clone())
                };
                // The access from create is good for the first connection only.
                let first = inner.first_access.lock().expect("access").take();
                let access = match first {
                    Some(a) => a,
                    None => inner
                        .control
                        .access(&target)
                        .await
                        .map_err(|s| finished_or(s, op))?,
                };
                Router::new(inner.control.clone(), target, access)
                    .map(Arc::new)
                    .map_err(|s| from_status(s, op, Stage::Before))
            })
            .await
            .cloned()
    }

    /// The `TaskExecStart` of `command` as `exec_id`, stdout and stderr piped.
    pub(crate) fn start_request(
        &self,
        exec_id: String,
        command: &Command,
        timeout_secs: Option<u32>,
    ) -> tcr::TaskExecStartRequest {
        let env = api::StringMap {
            contents: command
                .env()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        tcr::TaskExecStartRequest {
            task_id: self.task_id().unwrap_or_default().to_owned(),
            exec_id,
            command_args: command.argv().to_vec(),
            // Both default to DEVNULL (0) in the proto: set them.
            stdout_config: tcr::TaskExecStdoutConfig::Pipe as i32,
            stderr_config: tcr::TaskExecStderrConfig::Pipe as i32,
            timeout_secs,
            workdir: command.workdir().map(str::to_owned),
            // As the Python client sends env (sandbox/_common.py exec_via_tcr, _secret_sources).
            secret_sources: if env.contents.is_empty() {
                Vec::new()
            } else {
                vec![api::SecretSource {
                    source: Some(api::secret_source::Source::Env(env)),
                }]
            },
            ..Default::default()
        }
    }

    /// `TaskExecStart`, repeated with the same `exec_id` on transient failures (the router
    /// runs one exec per `exec_id`, as the client's own retries rely on).
    pub(crate) async fn exec_start(
        &self,
        router: &Router,
        request: tcr::TaskExecStartRequest,
        op: &'static str,
    ) -> Result<(), Error> {
        let config = &self.inner.config;
        let mut attempt = 0;
        loop {
            match router.exec_start(request.clone()).await {
                Ok(()) => return Ok(()),
                Err(s) if attempt < config.exec_start_retries && error::transient(&s) => {
                    attempt += 1;
                    let Some(wait) = execseam_adapter_kit::retry::own_retry_wait(
                        error::requested_delay(&s),
                        Duration::from_millis(50 << attempt.min(5)),
                    ) else {
                        return Err(from_status(s, op, Stage::Submit));
                    };
                    tracing::debug!(provider = PROVIDER, code = ?s.code(), attempt, "TaskExecStart failed; retrying with the same exec_id");
                    tokio::time::sleep(wait).await;
                }
                Err(s) => return Err(from_status(s, op, Stage::Submit)),
            }
        }
    }

    /// Follows exec `exec_id` from `from` (stdout, stderr bytes) to its exit, writing `stdin`
    /// first when given (then closed).
    pub(crate) fn follow(
        &self,
        router: Arc<Router>,
        exec_id: String,
        from: [u64; 2],
        stdin: Option<Bytes>,
        deadline: Option<(Instant, Duration)>,
    ) -> mpsc::Receiver<Result<Event, Error>> {
        let config = &self.inner.config;
        let (tx, rx) = mpsc::channel(32);
        let driver = Driver {
            router,
            task_id: self.task_id().unwrap_or_default().to_owned(),
            exec_id,
            from,
            max_resumes: config.max_resumes,
            idle: config.stream_idle_timeout,
            deadline,
            tx,
        };
        tokio::spawn(driver.run(stdin));
        rx
    }

    async fn start(&self, command: Command) -> Result<EventStream, Error> {
        // The task's command router `execve`s the argv in the container: its limit, asked.
        self.inner
            .arg_max
            .check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)
            .await?;
        tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
        let router = self.router("exec").await?;
        let exec_id = uuid4();
        let config = &self.inner.config;
        // The host's deadline (a `WithDeadline` around this exec) is Modal's kill too (D29).
        let timeout = execseam_adapter_kit::deadline::provider_timeout(config.exec_timeout);
        let timeout_secs = timeout.map(|d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        let request = self.start_request(exec_id.clone(), &command, timeout_secs);
        let started = Instant::now();
        self.exec_start(&router, request, "exec").await?;
        tracing::debug!(provider = PROVIDER, %exec_id, "started");
        let deadline = timeout.map(|d| (started, d));
        let rx = self.follow(
            router,
            exec_id,
            [0, 0],
            Some(command.stdin().clone()),
            deadline,
        );
        Ok(EventStream::new(ChannelEvents(rx)))
    }
}

impl Exec for ModalExec {
    execseam_adapter_kit::accessors!(self => provider: PROVIDER, capabilities: CAPABILITIES);

    execseam_adapter_kit::exec_by!(start);

    /// Native: the task command router's execs by a key-derived `exec_id` (see
    /// [`crate::process`]).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        Some(Box::new(crate::process::ModalProcesses::new(self)))
    }
}

execseam_adapter_kit::exec_stream_by!(ModalExec: start);

impl Sandbox for ModalExec {
    execseam_adapter_kit::sandbox_fields!(id: inner.sandbox_id, ownership: inner.ownership);

    /// `SandboxTerminateV2` (`SandboxTerminate` for a V1 id): every command in it ends.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.inner
                .control
                .terminate(&self.inner.sandbox_id, self.inner.v2)
                .await
                .map_err(|s| from_status(s, "destroy", Stage::Before))
        })
    }
}

struct Driver {
    router: Arc<Router>,
    task_id: String,
    exec_id: String,
    /// Where the stdout and stderr reads start.
    from: [u64; 2],
    max_resumes: u32,
    /// `ModalConfig::stream_idle_timeout`.
    idle: Duration,
    deadline: Option<(Instant, Duration)>,
    tx: mpsc::Sender<Result<Event, Error>>,
}

fn started_error(s: Status) -> Error {
    from_status(s, "exec", Stage::After)
}

impl Driver {
    async fn run(self, stdin: Option<Bytes>) {
        let this = Arc::new(self);
        let stdin_task = tokio::spawn(this.clone().feed_stdin(stdin));
        let out = tokio::spawn(this.clone().read(tcr::TaskExecStdioFileDescriptor::Stdout));
        let err = tokio::spawn(this.clone().read(tcr::TaskExecStdioFileDescriptor::Stderr));
        let wait = tokio::spawn(this.clone().wait());
        let abort = [
            stdin_task.abort_handle(),
            out.abort_handle(),
            err.abort_handle(),
            wait.abort_handle(),
        ];
        // Stops everything if the consumer goes away (no remote kill exists: see CAPABILITIES).
        let consumer_gone = this.tx.clone();
        let result = tokio::select! {
            r = async {
                let (o, e) = tokio::join!(out, err);
                for r in [o, e] {
                    match r {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return Err(e),
                        Err(_) => return Err(protocol("exec", "an output reader stopped")),
                    }
                }
                match wait.await {
                    Ok(r) => r,
                    Err(_) => Err(protocol("exec", "the exit waiter stopped")),
                }
            } => Some(r),
            () = consumer_gone.closed() => None,
        };
        let Some(result) = result else {
            for a in abort {
                a.abort();
            }
            return;
        };
        let stdin_failure = match stdin_task.await {
            Ok(Err(e)) => Some(e),
            _ => None,
        };
        let result = match (result, stdin_failure) {
            (Ok(_), Some(e)) => Err(e),
            (r, _) => r,
        };
        let _ = this.tx.send(result.map(Event::Exit)).await;
    }

    /// Writes stdin by offset and closes it. A write refused because the command already
    /// exited (FAILED_PRECONDITION: it did not read it all) is not an error.
    async fn feed_stdin(self: Arc<Self>, stdin: Option<Bytes>) -> Result<(), Error> {
        let Some(stdin) = stdin else { return Ok(()) };
        let mut offset = 0usize;
        loop {
            let end = (offset + STDIN_CHUNK).min(stdin.len());
            let eof = end == stdin.len();
            let req = tcr::TaskExecStdinWriteRequest {
                task_id: self.task_id.clone(),
                exec_id: self.exec_id.clone(),
                offset: offset as u64,
                data: stdin.slice(offset..end),
                eof,
            };
            let mut failures = 0;
            loop {
                match self.router.stdin_write(req.clone()).await {
                    Ok(()) => break,
                    Err(s) if s.code() == Code::FailedPrecondition => return Ok(()),
                    // Offset-addressed: repeating a write is safe (the router drops the overlap).
                    Err(s) if failures < self.max_resumes && error::transient(&s) => {
                        failures += 1;
                        tokio::time::sleep(Duration::from_millis(10 << failures.min(6))).await;
                    }
                    Err(s) => return Err(from_status(s, "exec_stdin", Stage::After)),
                }
            }
            if eof {
                return Ok(());
            }
            offset = end;
        }
    }

    /// Forwards one output stream, reopening it from the bytes received after a transient
    /// failure (at most `max_resumes` times in a row without progress). A stream that ends
    /// with OK has delivered everything.
    async fn read(self: Arc<Self>, fd: tcr::TaskExecStdioFileDescriptor) -> Result<(), Error> {
        let mut offset = self.from[fd as usize];
        let mut failures = 0u32;
        loop {
            let failure = match self.read_once(fd, &mut offset).await {
                Ok(true) => return Ok(()),
                Ok(false) => return Ok(()), // the consumer went away; `run` notices
                Err((s, progressed)) => {
                    if progressed {
                        failures = 0;
                    }
                    s
                }
            };
            if !error::resumable(&failure) || failures >= self.max_resumes {
                return Err(started_error(failure));
            }
            failures += 1;
            tracing::debug!(provider = PROVIDER, code = ?failure.code(), failures, "output stream failed; reopening from its offset");
            tokio::time::sleep(Duration::from_millis(10 << failures.min(6))).await;
        }
    }

    /// One `TaskExecStdioRead` from `offset`. `Ok(true)`: ended OK; `Ok(false)`: dropped.
    async fn read_once(
        &self,
        fd: tcr::TaskExecStdioFileDescriptor,
        offset: &mut u64,
    ) -> Result<bool, (Status, bool)> {
        let start = *offset;
        let progressed = |o: &u64| *o > start;
        self.router.refresh_if_due().await.map_err(|s| (s, false))?;
        let msg = tcr::TaskExecStdioReadRequest {
            task_id: self.task_id.clone(),
            exec_id: self.exec_id.clone(),
            offset: *offset,
            file_descriptor: fd as i32,
        };
        let mut stream = match self.router.stdio_read(msg).await {
            Ok(r) => r,
            // No answer to the open within the request timeout: the router holds it. Reopening
            // would wait as long again each time (issue 38, D12: 11 opens of 60 s, 664 s), so
            // this ends the stream, as a silent one ends after its poll.
            Err(s) if error::origin(&s) == error::Origin::Timer => {
                return Err((
                    Status::deadline_exceeded(format!(
                        "the {fd:?} stream did not open within the request timeout: {}",
                        s.message()
                    )),
                    false,
                ));
            }
            Err(s) => return Err((s, false)),
        };
        loop {
            // `Streaming::message` is cancel safe.
            let Ok(next) = tokio::time::timeout(self.idle, stream.message()).await else {
                // Silence: a running command may be silent; one that exited is not.
                match self.router.poll(&self.task_id, &self.exec_id).await {
                    Ok(p) if p.exit_status.is_none() => continue,
                    Ok(_) => {
                        return Err((
                            Status::deadline_exceeded(format!(
                                "the {fd:?} stream stayed silent for {:?} after the command exited (stream_idle_timeout)",
                                self.idle
                            )),
                            progressed(offset),
                        ));
                    }
                    // The router answers neither: not healed by reopening the stream.
                    Err(s) if error::resumable(&s) => {
                        return Err((
                            Status::deadline_exceeded(format!(
                                "the {fd:?} stream stayed silent for {:?} (stream_idle_timeout) and TaskExecPoll failed: {}",
                                self.idle,
                                s.message()
                            )),
                            progressed(offset),
                        ));
                    }
                    Err(s) => return Err((s, progressed(offset))),
                }
            };
            match next {
                Ok(Some(m)) => {
                    if m.data.is_empty() {
                        continue;
                    }
                    *offset += m.data.len() as u64;
                    let event = match fd {
                        tcr::TaskExecStdioFileDescriptor::Stdout => Event::Stdout(m.data),
                        tcr::TaskExecStdioFileDescriptor::Stderr => Event::Stderr(m.data),
                    };
                    if self.tx.send(Ok(event)).await.is_err() {
                        return Ok(false);
                    }
                }
                Ok(None) => return Ok(true),
                Err(s) => {
                    let p = progressed(offset);
                    return Err((s, p));
                }
            }
        }
    }

    /// `TaskExecWait`, repeated on transient failures (it only reads).
    async fn wait(self: Arc<Self>) -> Result<Exit, Error> {
        let mut failures = 0u32;
        let status = 'answer: loop {
            let call = self.router.wait(&self.task_id, &self.exec_id);
            tokio::pin!(call);
            // A silent wait is checked with a poll every `idle`: while the command runs it goes
            // on; once it exited, the poll's answer is the router's exit status.
            let r = loop {
                tokio::select! {
                    r = &mut call => break r,
                    () = tokio::time::sleep(self.idle) => {
                        use tcr::task_exec_poll_response::ExitStatus as P;
                        match self.router.poll(&self.task_id, &self.exec_id).await {
                            Ok(p) => match p.exit_status {
                                None => {}
                                Some(P::Code(c)) => break 'answer Some((Some(c), None)),
                                Some(P::Signal(n)) => break 'answer Some((None, Some(n))),
                            },
                            Err(s) => return Err(started_error(s)),
                        }
                    }
                }
            };
            match r {
                Ok(r) => {
                    use tcr::task_exec_wait_response::ExitStatus as W;
                    break match r.exit_status {
                        Some(W::Code(c)) => Some((Some(c), None)),
                        Some(W::Signal(n)) => Some((None, Some(n))),
                        None => None,
                    };
                }
                Err(s) if failures < self.max_resumes && error::resumable(&s) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(50 << failures.min(5))).await;
                }
                Err(s) => return Err(started_error(s)),
            }
        };
        match status {
            Some((Some(c), _)) => Ok(Exit::Code(c)),
            Some((None, Some(9))) if self.timed_out() => Err(Error::new(
                ErrorKind::Timeout(Deadline::Command),
                "Modal killed the command at its timeout_secs (ModalConfig::exec_timeout or the host's deadline)",
            )
            .with_retry(Retry::Unsafe)
            .with_provider(PROVIDER)
            .with_operation("exec")),
            Some((None, Some(n))) => Ok(Exit::Signal(n)),
            Some((None, None)) | None => Err(protocol(
                "exec",
                "TaskExecWait answered without a code or a signal",
            )),
        }
    }

    /// True when the configured exec timeout has passed (a SIGKILL then is Modal's).
    fn timed_out(&self) -> bool {
        self.deadline
            .is_some_and(|(start, d)| start.elapsed() + Duration::from_millis(200) >= d)
    }
}
