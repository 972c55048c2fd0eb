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
use execseam_core::{
    BoxFuture, Capabilities, Command, Deadline, Delivery, Error, ErrorKind, Event, EventStream,
    Exec, ExecStream, Exit, Output, Retry,
};
use tokio::sync::{OnceCell, mpsc};
use tonic::{Code, Status};

use crate::client::{AccessTarget, Control, Create, Router, uuid4};
use crate::config::{ENV_SANDBOX_ID, ModalConfig, config_error};
use crate::error::{self, PROVIDER, Phase, from_status, protocol};
use crate::wire::{api, tcr};

/// The capabilities of the adapter.
pub const CAPABILITIES: Capabilities = Capabilities {
    argv: Delivery::Native,
    stdin: Delivery::Native,
    workdir: Delivery::Native,
    env: Delivery::Native,
    streaming: true,
    // Modal has no call that kills one command (the 1.6.4 client has none either); only
    // `timeout_secs` (ModalConfig::exec_timeout) and terminating the sandbox stop it.
    remote_kill: false,
    binary_output: true,
    max_stdin: None,
    max_output: None,
    native_tools: &[],
};

/// The stdin bytes per `TaskExecStdinWrite` (the client buffers up to 16 MiB per drain).
const STDIN_CHUNK: usize = 4 * 1024 * 1024;

/// A sandbox as `SandboxListV2` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxSummary {
    /// `sb-…`.
    pub id: String,
    /// The app it belongs to.
    pub app_id: String,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// Created at, seconds since the epoch.
    pub created_at: f64,
    /// True while it runs.
    pub running: bool,
}

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
}

/// Commands in one Modal sandbox. Cheap to clone. See the [crate docs](crate).
#[derive(Clone)]
pub struct ModalExec {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ModalExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalExec")
            .field("sandbox_id", &self.inner.sandbox_id)
            .field("task_id", &self.inner.task_id.get())
            .finish_non_exhaustive()
    }
}

fn control(config: &Arc<ModalConfig>) -> Result<Arc<Control>, Error> {
    Control::new(config.clone())
        .map(Arc::new)
        .map_err(|s| from_status(s, "config", Phase::Other))
}

impl ModalExec {
    /// Creates a sandbox: `AppGetOrCreate`, `ImageGetOrCreate` (unless an image id is
    /// configured), `AuthTokenGet`, `SandboxCreateV2`. Retried creates carry the same
    /// idempotency key, so a lost answer does not make a second sandbox.
    pub async fn create(config: ModalConfig) -> Result<ModalExec, Error> {
        let config = Arc::new(config);
        let control = control(&config)?;
        let app_id = control
            .app()
            .await
            .map_err(|s| from_status(s, "create_sandbox", Phase::Create))?;
        let image_id = control
            .image(&app_id)
            .await
            .map_err(|s| from_status(s, "create_sandbox", Phase::Create))?;
        let definition = api::Sandbox {
            image_id,
            timeout_secs: u32::try_from(config.sandbox_timeout.as_secs()).unwrap_or(u32::MAX),
            idle_timeout_secs: config
                .idle_timeout
                .map(|d| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX)),
            workdir: config.workdir.clone(),
            network_access: Some(api::NetworkAccess {
                network_access_type: api::network_access::NetworkAccessType::Open as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = control
            .create_sandbox(Create {
                app_id,
                definition,
                env: Vec::new(),
            })
            .await
            .map_err(|s| from_status(s, "create_sandbox", Phase::Create))?;
        if created.sandbox_id.is_empty() {
            return Err(protocol(
                "create_sandbox",
                "SandboxCreateV2 returned no sandbox_id",
            ));
        }
        tracing::debug!(provider = PROVIDER, sandbox = %created.sandbox_id, "created");
        let exec = ModalExec::build(config, control, created.sandbox_id);
        if !created.task_id.is_empty() {
            let _ = exec.inner.task_id.set(created.task_id);
        }
        *exec.inner.first_access.lock().expect("access") = created.command_router_access;
        Ok(exec)
    }

    /// Connects to a running sandbox by id (`SandboxWait` with timeout 0, then its task and
    /// router access). V1 ids use the V1 RPCs. A finished sandbox is `NotFound`.
    pub async fn connect(config: ModalConfig, sandbox_id: &str) -> Result<ModalExec, Error> {
        let exec = ModalExec::attach(config, sandbox_id)?;
        let inner = &exec.inner;
        let result = inner
            .control
            .wait(sandbox_id, inner.v2, 0.0)
            .await
            .map_err(|s| from_status(s, "connect_sandbox", Phase::Other))?;
        if let Some(r) = result {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "sandbox {sandbox_id} has finished (status {}{})",
                    r.status,
                    if r.exception.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", r.exception)
                    }
                ),
            )
            .with_retry(Retry::Never)
            .with_provider(PROVIDER)
            .with_operation("connect_sandbox"));
        }
        exec.router("connect_sandbox").await?;
        Ok(exec)
    }

    /// A handle on sandbox `sandbox_id` without any call: its task and router access are
    /// fetched by the first exec (a sandbox that does not exist is then `NotFound`).
    pub fn attach(config: ModalConfig, sandbox_id: &str) -> Result<ModalExec, Error> {
        if !sandbox_id.starts_with("sb-") || !sandbox_id.is_ascii() {
            return Err(config_error(format!(
                "sandbox id {sandbox_id:?} does not start with sb-"
            )));
        }
        let config = Arc::new(config);
        let control = control(&config)?;
        Ok(ModalExec::build(config, control, sandbox_id.to_owned()))
    }

    /// [`ModalConfig::from_env`], then [`connect`](Self::connect) to
    /// `EXECSEAM_MODAL_SANDBOX_ID` when set, else [`create`](Self::create).
    pub async fn from_env() -> Result<ModalExec, Error> {
        let config = ModalConfig::from_env()?;
        match std::env::var(ENV_SANDBOX_ID).ok().filter(|s| !s.is_empty()) {
            Some(id) => ModalExec::connect(config, &id).await,
            None => ModalExec::create(config).await,
        }
    }

    /// The running sandboxes of the configured app (`SandboxListV2`, every page).
    pub async fn list(config: ModalConfig) -> Result<Vec<SandboxSummary>, Error> {
        let config = Arc::new(config);
        let control = control(&config)?;
        let map = |s| from_status(s, "list_sandboxes", Phase::Other);
        let app_id = control.app().await.map_err(map)?;
        let mut out = Vec::new();
        let mut before = 0.0;
        loop {
            let page = control
                .list_page(&app_id, before, false)
                .await
                .map_err(map)?;
            let Some(last) = page.last() else { break };
            if before > 0.0 && last.created_at >= before {
                return Err(protocol(
                    "list_sandboxes",
                    "SandboxListV2 did not page backwards",
                ));
            }
            before = last.created_at;
            out.extend(page.into_iter().map(|s| {
                SandboxSummary {
                    running: s
                        .task_info
                        .as_ref()
                        .and_then(|t| t.result.as_ref())
                        .is_none_or(|r| r.status == 0),
                    id: s.id,
                    app_id: s.app_id,
                    name: (!s.name.is_empty()).then_some(s.name),
                    created_at: s.created_at,
                }
            }));
        }
        Ok(out)
    }

    fn build(config: Arc<ModalConfig>, control: Arc<Control>, sandbox_id: String) -> ModalExec {
        ModalExec {
            inner: Arc::new(Inner {
                v2: !is_v1_sandbox_id(&sandbox_id),
                config,
                control,
                sandbox_id,
                task_id: OnceCell::new(),
                first_access: Mutex::new(None),
                router: OnceCell::new(),
            }),
        }
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

    /// Terminates the sandbox (`SandboxTerminateV2`; every command in it ends). Idempotent.
    pub async fn terminate(&self) -> Result<(), Error> {
        self.inner
            .control
            .terminate(&self.inner.sandbox_id, self.inner.v2)
            .await
            .map_err(|s| from_status(s, "terminate_sandbox", Phase::Other))
    }

    /// The sandbox's result once it has finished (`SandboxWait` with timeout 0), `None` while
    /// it runs.
    pub async fn poll(&self) -> Result<Option<api::GenericResult>, Error> {
        self.inner
            .control
            .wait(&self.inner.sandbox_id, self.inner.v2, 0.0)
            .await
            .map_err(|s| from_status(s, "poll_sandbox", Phase::Other))
    }

    async fn router(&self, op: &'static str) -> Result<Arc<Router>, Error> {
        let inner = &self.inner;
        let map = |s| from_status(s, op, Phase::Other);
        let task_id = inner
            .task_id
            .get_or_try_init(|| async {
                inner
                    .control
                    .task_id(&inner.sandbox_id, inner.v2)
                    .await
                    .map_err(|s| {
                        // A finished sandbox has no task: the command can never run.
                        if s.code() == Code::FailedPrecondition {
                            Error::new(ErrorKind::NotFound, s.message().to_owned())
                                .with_retry(Retry::Never)
                                .with_provider(PROVIDER)
                                .with_operation(op)
                        } else {
                            map(s)
                        }
                    })
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
                    None => inner.control.access(&target).await.map_err(|s| {
                        // FAILED_PRECONDITION here means the sandbox has finished (the V2
                        // client turns it into NotFoundError, sandbox/_impl_v2.py).
                        if s.code() == Code::FailedPrecondition {
                            Error::new(ErrorKind::NotFound, s.message().to_owned())
                                .with_retry(Retry::Never)
                                .with_provider(PROVIDER)
                                .with_operation(op)
                        } else {
                            map(s)
                        }
                    })?,
                };
                Router::new(inner.control.clone(), target, access)
                    .map(Arc::new)
                    .map_err(map)
            })
            .await
            .cloned()
    }

    async fn start(&self, command: Command) -> Result<EventStream, Error> {
        tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
        let router = self.router("exec").await?;
        let task_id = self.task_id().unwrap_or_default().to_owned();
        let exec_id = uuid4();
        let env = api::StringMap {
            contents: command
                .env()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let config = &self.inner.config;
        let timeout_secs = config.exec_timeout.map(|d| {
            let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            u32::try_from(s.max(1)).unwrap_or(u32::MAX)
        });
        let request = tcr::TaskExecStartRequest {
            task_id: task_id.clone(),
            exec_id: exec_id.clone(),
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
        };
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            match router.exec_start(request.clone()).await {
                Ok(()) => break,
                Err(s) if attempt < config.exec_start_retries && error::transient(&s) => {
                    attempt += 1;
                    let wait = error::retry_after(&s)
                        .unwrap_or(Duration::from_millis(50 << attempt.min(5)));
                    tracing::debug!(provider = PROVIDER, code = ?s.code(), attempt, "TaskExecStart failed; retrying with the same exec_id");
                    tokio::time::sleep(wait).await;
                }
                Err(s) => return Err(from_status(s, "exec", Phase::Start)),
            }
        }
        tracing::debug!(provider = PROVIDER, %exec_id, "started");
        let (tx, rx) = mpsc::channel(32);
        let driver = Driver {
            router,
            task_id,
            exec_id,
            max_resumes: config.max_resumes,
            deadline: config.exec_timeout.map(|d| (started, d)),
            tx,
        };
        tokio::spawn(driver.run(command.stdin().clone()));
        Ok(EventStream::new(Receiver(rx)))
    }
}

impl Exec for ModalExec {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move { self.start(command).await?.collect().await })
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }
}

impl ExecStream for ModalExec {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        Box::pin(self.start(command))
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

struct Driver {
    router: Arc<Router>,
    task_id: String,
    exec_id: String,
    max_resumes: u32,
    deadline: Option<(Instant, Duration)>,
    tx: mpsc::Sender<Result<Event, Error>>,
}

fn started_error(s: Status) -> Error {
    from_status(s, "exec", Phase::Started)
}

impl Driver {
    async fn run(self, stdin: Bytes) {
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
    async fn feed_stdin(self: Arc<Self>, stdin: Bytes) -> Result<(), Error> {
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
                    Err(s) => return Err(from_status(s, "exec_stdin", Phase::Started)),
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
        let mut offset = 0u64;
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
        let req = self.router.request(msg).map_err(|s| (s, false))?;
        let mut stream = match self.router.client().task_exec_stdio_read(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => return Err((s, false)),
        };
        loop {
            match stream.message().await {
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
        let resp = loop {
            match self.router.wait(&self.task_id, &self.exec_id).await {
                Ok(r) => break r,
                Err(s) if failures < self.max_resumes && error::resumable(&s) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(50 << failures.min(5))).await;
                }
                Err(s) => return Err(started_error(s)),
            }
        };
        use tcr::task_exec_wait_response::ExitStatus;
        match resp.exit_status {
            Some(ExitStatus::Code(c)) => Ok(Exit::Code(c)),
            Some(ExitStatus::Signal(9)) if self.timed_out() => Err(Error::new(
                ErrorKind::Timeout(Deadline::Command),
                "Modal killed the command at its timeout_secs (ModalConfig::exec_timeout)",
            )
            .with_retry(Retry::Unsafe)
            .with_provider(PROVIDER)
            .with_operation("exec")),
            Some(ExitStatus::Signal(n)) => Ok(Exit::Signal(n)),
            None => Err(protocol(
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
