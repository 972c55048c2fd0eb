#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! AWS Bedrock AgentCore Code Interpreter (data plane) on loopback.
//!
//! The five REST routes of the `bedrock-agentcore` data plane's code-interpreter operations
//! (restJson1, API version 2024-02-28):
//!
//! | Operation | Route |
//! |---|---|
//! | StartCodeInterpreterSession | `PUT /code-interpreters/{id}/sessions/start` |
//! | InvokeCodeInterpreter | `POST /code-interpreters/{id}/tools/invoke` (header `x-amzn-code-interpreter-session-id`) |
//! | StopCodeInterpreterSession | `PUT /code-interpreters/{id}/sessions/stop?sessionId=` |
//! | GetCodeInterpreterSession | `GET /code-interpreters/{id}/sessions/get?sessionId=` |
//! | ListCodeInterpreterSessions | `POST /code-interpreters/{id}/sessions/list` |
//!
//! InvokeCodeInterpreter answers with `application/vnd.amazon.eventstream`: one `result` event
//! (a `CodeInterpreterResult`), or an exception event, framed with correct prelude and message
//! CRCs ([`eventstream`]). Errors of the whole call are restJson1 errors (status,
//! `x-amzn-errortype`, `{"message"}`). Session status is `READY` or `TERMINATED`; a session ends
//! when stopped or when its `sessionTimeoutSeconds` runs out, and its commands are killed.
//!
//! Tools: `executeCommand` (bash `-c` in the session directory), `startCommandExecution`,
//! `getTask`, `stopTask`, `writeFiles`, `readFiles`, `listFiles`, `removeFiles`, and
//! `executeCode` for `python`, `javascript` and `typescript` (one interpreter context per session
//! and language, kept between calls, reset by `clearContext: true`; TypeScript needs esbuild:
//! [`AgentCoreEmulator::start_with_typescript`], else it is answered with a tool error).
//!
//! `executionTime`: seconds for commands (observed on the service, against the model's
//! milliseconds), milliseconds for `executeCode` (the model; never observed). Commands and code run as
//! `genesis1ptools` (uid 992); a fresh session directory holds [`SESSION_DIR_ENTRIES`].
//!
//! Each session is a [`Sandbox`] whose `/opt/amazon/genesis1p-tools/var` (the working directory,
//! `HOME`) and `/tmp` are private; files tools resolve relative paths against the working
//! directory, like the service. Reproduced quirks: `executeCommand` stdout has `\r\n` line
//! endings (a pty's, as observed on the service), `readFiles` resources carry no `type`, `listFiles` is in directory
//! order (unsorted), a signal death is a negative `exitCode` (a Python runner's convention; the
//! service's own is unknown).
//!
//! **SigV4 is not verified**: a request needs an `authorization` header naming a credential
//! (`Credential=<access key id>/…`); with [`EmulatorOptions::token`] the access key id must equal it.
//! Signatures, dates, scopes and session tokens are ignored.
//!
//! Faults: the nine standard ones on route `exec` (the invocation that submits a command:
//! `executeCommand`, `startCommandExecution`, `executeCode`), rendered in AgentCore's wire format
//! (429 ThrottlingException with `Retry-After`, 500 InternalServerException after the command ran,
//! 503 ServiceUnavailableException, a reset, a result frame cut in half, a result whose JSON is
//! broken, a delay, 403 UnrecognizedClientException, the session terminated mid-command with a
//! `resourceNotFoundException` event); other routes: `files`, `task`, `start`, `stop`, `get`,
//! `list`. AgentCore-specific faults ([`AgentCoreFault`]: any modelled exception as an HTTP error
//! or as a stream event, the generic error frame, bad CRCs, a stream without a result) are armed
//! with [`AgentCoreEmulator::arm`].
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

pub mod eventstream;
mod kernel;
mod routes;
mod tools;
pub mod wire;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use execseam_core::Output;
use tokio::task::AbortHandle;

use axum::Router;
use execseam_emulator_kit::{
    Emulator, FAULT_NAMES, FaultHandle, Provider, Rendered, Sandbox, SandboxEntry, SandboxSpec,
    Sandboxing, Shell, User,
};

pub use wire::Exception;

/// The built-in code interpreter's identifier.
pub const DEFAULT_IDENTIFIER: &str = "aws.codeinterpreter.v1";
/// The session working directory (and `HOME`) of the AWS-managed code interpreter.
pub const SESSION_ROOT: &str = "/opt/amazon/genesis1p-tools/var";
/// The user commands run as on the service.
pub const SESSION_USER: &str = "genesis1ptools";
/// Its uid.
pub const SESSION_UID: u32 = 992;
/// The access key id the emulator advertises in [`Emulator::env`] when no token is set.
pub const ACCESS_KEY_ID: &str = "AKIAEXECSEAMEMULATOR";
/// The region it advertises (any region is accepted).
pub const REGION: &str = "us-east-1";

/// A fault of AgentCore's own wire format, beyond the nine standard ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentCoreFault {
    /// The call fails with this modelled exception as its HTTP status. An
    /// `InternalServerException` is sent after the tool ran; the others before.
    HttpException(Exception),
    /// A 200 stream whose only message is this exception event (after the tool ran for an
    /// `InternalServerException`, before it otherwise).
    StreamException(Exception),
    /// An exception event of a type the model does not have.
    UnknownException,
    /// The generic AWS error frame (`:message-type = error`) instead of the result.
    ErrorFrame,
    /// The result frame with a corrupted prelude CRC.
    BadPreludeCrc,
    /// The result frame with a corrupted message CRC.
    BadMessageCrc,
    /// A 200 stream that ends cleanly without any event (after the tool ran).
    NoResult,
}

/// A session's status, as `GetCodeInterpreterSession` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStatus {
    /// Accepting invocations.
    Ready,
    /// Stopped or expired.
    Terminated,
}

impl SessionStatus {
    fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Ready => "READY",
            SessionStatus::Terminated => "TERMINATED",
        }
    }
}

/// How a task (`startCommandExecution`) stands.
#[derive(Clone, Debug)]
pub(crate) enum TaskState {
    Working,
    Done { output: Output, elapsed: Duration },
    Failed { message: String },
    Canceled,
}

pub(crate) struct Task {
    pub(crate) state: Mutex<TaskState>,
    pub(crate) abort: Mutex<Option<AbortHandle>>,
}

/// One code-interpreter session: the registry's entry (terminated sessions stay listed).
pub struct Session {
    pub(crate) id: String,
    pub(crate) identifier: String,
    pub(crate) name: String,
    pub(crate) created_at: SystemTime,
    pub(crate) created: Instant,
    pub(crate) timeout: Duration,
    pub(crate) status: Mutex<SessionStatus>,
    pub(crate) last_updated: Mutex<SystemTime>,
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) tasks: Mutex<HashMap<String, Arc<Task>>>,
    /// `executeCode`'s interpreter contexts, by language ([`kernel`]).
    pub(crate) kernels: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<kernel::Kernel>>>>>,
    /// The esbuild package (a path visible in the sandbox) TypeScript cells are stripped with.
    pub(crate) esbuild: Option<String>,
}

impl Session {
    pub(crate) fn status(&self) -> SessionStatus {
        *self.status.lock().expect("status")
    }

    pub(crate) fn expired(&self) -> bool {
        self.created.elapsed() >= self.timeout
    }

    /// Ends the session: status TERMINATED, every command and task killed, the root removed.
    pub(crate) fn terminate(&self) {
        {
            let mut s = self.status.lock().expect("status");
            if *s == SessionStatus::Terminated {
                return;
            }
            *s = SessionStatus::Terminated;
        }
        *self.last_updated.lock().expect("last updated") = SystemTime::now();
        for task in self.tasks.lock().expect("tasks").values() {
            let mut st = task.state.lock().expect("task");
            if matches!(*st, TaskState::Working) {
                *st = TaskState::Canceled;
            }
        }
        for slot in self.kernels.lock().expect("kernels").drain() {
            if let Ok(mut k) = slot.1.try_lock()
                && let Some(k) = k.as_mut()
            {
                k.kill();
            }
        }
        self.sandbox.destroy();
    }
}

/// A READY session counts as a live sandbox; ending one terminates it.
impl SandboxEntry for Session {
    fn is_live(&self) -> bool {
        self.status() == SessionStatus::Ready
    }

    fn teardown(&self) {
        self.terminate();
    }
}

pub(crate) struct State {
    pub(crate) shell: Arc<Shell<AgentCore>>,
    /// The shell's, with the esbuild package bound in (see [`AgentCoreOptions::esbuild`]).
    pub(crate) sandboxing: Sandboxing,
    pub(crate) faults: FaultHandle,
    pub(crate) extra: Mutex<VecDeque<(String, AgentCoreFault)>>,
    /// Every session, oldest first (the registry has them by id).
    pub(crate) sessions: Mutex<BTreeMap<(SystemTime, String), Arc<Session>>>,
    pub(crate) tokens: Mutex<HashMap<String, String>>,
    pub(crate) pty_line_endings: AtomicBool,
    /// See [`Session::esbuild`].
    pub(crate) esbuild: Option<String>,
}

/// What a request should suffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Armed {
    Standard(execseam_emulator_kit::Fault),
    Extra(AgentCoreFault),
}

impl State {
    /// Counts the request of `route` and returns the fault to inject, if any.
    pub(crate) fn take(&self, route: &str) -> Option<Armed> {
        if let Some(f) = self.faults.take(route) {
            return Some(Armed::Standard(f));
        }
        let mut extra = self.extra.lock().expect("extra faults");
        let i = extra.iter().position(|(r, _)| r == route || r == "*")?;
        extra.remove(i).map(|(_, f)| Armed::Extra(f))
    }

    pub(crate) fn session(&self, id: &str) -> Option<Arc<Session>> {
        let s = self.shell.sandboxes().lock().get(id).cloned()?;
        if s.status() == SessionStatus::Ready && s.expired() {
            s.terminate();
        }
        Some(s)
    }

    pub(crate) fn spec() -> SandboxSpec {
        let env: BTreeMap<String, String> = [
            ("SHELL", "/bin/bash"),
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        // The service runs commands as `genesis1ptools`, uid 992 (research note, correction of
        // 2026-12-01), home the session root; the hostname is not documented.
        SandboxSpec::new(
            "agentcore",
            "localhost",
            User::new(SESSION_USER, SESSION_UID, SESSION_ROOT),
            env,
        )
        .other_users([User::root()])
    }

    pub(crate) fn create_session(
        &self,
        identifier: &str,
        name: String,
        timeout: Duration,
    ) -> std::io::Result<Arc<Session>> {
        let id = wire::session_id();
        let sandbox = Sandbox::create(id.clone(), State::spec(), &self.sandboxing)?;
        let now = SystemTime::now();
        let session = Arc::new(Session {
            id: id.clone(),
            identifier: identifier.to_owned(),
            name,
            created_at: now,
            created: Instant::now(),
            timeout,
            status: Mutex::new(SessionStatus::Ready),
            last_updated: Mutex::new(now),
            sandbox,
            tasks: Mutex::new(HashMap::new()),
            kernels: Mutex::new(HashMap::new()),
            esbuild: self.esbuild.clone(),
        });
        populate(&session.sandbox)?;
        self.shell.sandboxes().insert(id.clone(), session.clone());
        self.sessions
            .lock()
            .expect("sessions")
            .insert((now, id), session.clone());
        Ok(session)
    }

    fn reap(&self) {
        let all: Vec<Arc<Session>> = self.shell.sandboxes().lock().values().cloned().collect();
        for s in all {
            if s.status() == SessionStatus::Ready && s.expired() {
                tracing::debug!(session = %s.id, "agentcore emulator: session timed out");
                s.terminate();
            }
        }
    }
}

/// What a fresh session's working directory holds on the service (a real listing, research note
/// `cf-vercel-modal-nf.md`, correction "AWS AgentCore Code Interpreter behaviour"): `.ipython`,
/// `log`, `node_modules`, `nodejs-js-execution`, `nodejs-ts-execution`, `package.json`,
/// `package-lock.json`, `run`. Their contents are not known; the emulator's are empty directories
/// and minimal npm manifests, owned by the session's user.
pub const SESSION_DIR_ENTRIES: &[&str] = &[
    ".ipython",
    "log",
    "node_modules",
    "nodejs-js-execution",
    "nodejs-ts-execution",
    "package.json",
    "package-lock.json",
    "run",
];

fn populate(sandbox: &Sandbox) -> std::io::Result<()> {
    sandbox.fs_blocking_as(sandbox.user(), |fs| {
        for name in SESSION_DIR_ENTRIES {
            let host = fs.path(&format!("{SESSION_ROOT}/{name}"));
            match *name {
                "package.json" => std::fs::write(host, "{\n  \"dependencies\": {}\n}\n")?,
                "package-lock.json" => std::fs::write(
                    host,
                    "{\n  \"lockfileVersion\": 3,\n  \"requires\": true,\n  \"packages\": {}\n}\n",
                )?,
                _ => std::fs::create_dir_all(host)?,
            }
        }
        Ok(())
    })
}

/// Behaviour switches.
#[derive(Clone, Debug)]
pub struct AgentCoreOptions {
    /// The esbuild package directory TypeScript cells are stripped with (for example
    /// `target/interop/typescript/node_modules/esbuild`, which
    /// `execseam_test_util::interop::typescript_runtime` installs with tsx): its `node_modules`
    /// directory is bound read-only into every session at the same path. Without it
    /// `typescript` is refused. Default: `EXECSEAM_AGENTCORE_ESBUILD`, if set.
    pub esbuild: Option<PathBuf>,
}

impl Default for AgentCoreOptions {
    fn default() -> Self {
        AgentCoreOptions {
            esbuild: std::env::var_os("EXECSEAM_AGENTCORE_ESBUILD")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }
}

/// The AgentCore Code Interpreter emulator ([`Provider`]); its typed test accessors are reached
/// through [`AgentCoreEmulator`] (`Deref`).
pub struct AgentCore {
    state: Arc<State>,
}

/// A running AgentCore emulator.
pub type AgentCoreEmulator = Emulator<AgentCore>;

/// What the session routes render: the edge faults.
const EDGE: &[&str] = &["latency", "429", "503", "reset", "auth"];

impl Provider for AgentCore {
    const NAME: &'static str = "agentcore";
    /// `InvokeCodeInterpreter` renders every fault per tool route (`exec`, `task`, `files`,
    /// `invoke`); the session routes render the edge faults (and `start`/`stop` a 500).
    const FAULTS: Rendered = &[
        ("exec", FAULT_NAMES),
        ("task", FAULT_NAMES),
        ("files", FAULT_NAMES),
        ("invoke", FAULT_NAMES),
        ("start", &["latency", "429", "503", "reset", "auth", "500"]),
        ("stop", &["latency", "429", "503", "reset", "auth", "500"]),
        ("list", EDGE),
        ("get", EDGE),
    ];
    /// The access key id advertised (signatures are not verified).
    const PLACEHOLDER_TOKEN: &'static str = ACCESS_KEY_ID;
    const SCRATCH: &'static str = "/tmp/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "01VANISHED0000000000000000";
    type Options = AgentCoreOptions;
    type Sandbox = Session;
    /// The session id.
    type Key = String;

    async fn start(
        shell: Arc<Shell<AgentCore>>,
        options: AgentCoreOptions,
    ) -> std::io::Result<(AgentCore, Router)> {
        let mut sandboxing = shell.sandboxing().clone();
        let esbuild = match options.esbuild {
            None => None,
            Some(p) => {
                let p = std::path::absolute(&p)?;
                if !p.join("package.json").is_file() {
                    return Err(std::io::Error::other(format!(
                        "{} is not an esbuild package directory",
                        p.display()
                    )));
                }
                // esbuild's JavaScript API runs the platform binary of its sibling
                // `@esbuild/<platform>` package: bind the whole `node_modules`.
                let modules = p.parent().unwrap_or(&p).to_path_buf();
                sandboxing.mounts.push(execseam_emulator_kit::Mount {
                    sandbox: modules.to_string_lossy().into_owned(),
                    host: modules,
                    read_only: true,
                });
                Some(p.to_string_lossy().into_owned())
            }
        };
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
            sandboxing,
            extra: Mutex::new(VecDeque::new()),
            sessions: Mutex::new(BTreeMap::new()),
            tokens: Mutex::new(HashMap::new()),
            pty_line_endings: AtomicBool::new(true),
            esbuild,
        });
        // Sessions time out into TERMINATED and stay listed: not the shell's reaper, which
        // removes what it reaps.
        let weak: Weak<State> = Arc::downgrade(&state);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                match weak.upgrade() {
                    Some(s) => s.reap(),
                    None => break,
                }
            }
        });
        let router = routes::router(state.clone());
        Ok((AgentCore { state }, router))
    }

    /// The variables the AWS SDKs (boto3, the Rust SDK) and `AgentCoreConfig::from_env` need.
    fn env(&self, shell: &Shell<AgentCore>) -> Vec<(String, String)> {
        vec![
            (
                "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE".into(),
                shell.base_url().to_owned(),
            ),
            ("AWS_REGION".into(), REGION.into()),
            (
                "AWS_ACCESS_KEY_ID".into(),
                shell.token().advertised().to_owned(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY".into(),
                "execseam-emulator-does-not-verify-signatures".into(),
            ),
            (
                "AGENTCORE_CODE_INTERPRETER_ID".into(),
                DEFAULT_IDENTIFIER.into(),
            ),
        ]
    }
}

impl AgentCore {
    /// Arms an AgentCore-specific fault for the next request of `route` (`"*"`: any route).
    pub fn arm(&self, route: &str, fault: AgentCoreFault) {
        self.state
            .extra
            .lock()
            .expect("extra faults")
            .push_back((route.to_owned(), fault));
    }

    /// How many requests of `route` arrived (`exec`: invocations that submit a command).
    pub fn count(&self, route: &str) -> u64 {
        self.state.faults.count(route)
    }

    /// Whether `pty`-style `\r\n` line endings are applied to command stdout (default true, as
    /// observed on the service).
    pub fn set_pty_line_endings(&self, on: bool) {
        self.state.pty_line_endings.store(on, Ordering::SeqCst);
    }

    /// The status of a session, if it exists.
    pub fn session_status(&self, id: &str) -> Option<SessionStatus> {
        self.state.session(id).map(|s| s.status())
    }

    /// Every session id, oldest first.
    pub fn session_ids(&self) -> Vec<String> {
        self.state
            .sessions
            .lock()
            .expect("sessions")
            .values()
            .map(|s| s.id.clone())
            .collect()
    }

    /// Where a path of a session's sandbox lives on the host (relative paths: under the
    /// session root), to check files from a test.
    pub fn host_path(&self, session: &str, path: &str) -> Option<PathBuf> {
        let s = self.state.session(session)?;
        Some(s.sandbox.host_path(&tools::resolve(path)))
    }

    /// A session's sandbox, to inspect it from a test.
    pub fn sandbox(&self, session: &str) -> Option<Arc<Sandbox>> {
        Some(self.state.session(session)?.sandbox.clone())
    }

    /// The path a session's commands see for `path` (differs from it only without namespaces).
    pub fn visible_path(&self, session: &str, path: &str) -> Option<String> {
        let s = self.state.session(session)?;
        Some(s.sandbox.visible_path(path))
    }

    /// Creates a session directly (as StartCodeInterpreterSession would) and returns its id.
    pub fn create_session(&self, timeout: Duration) -> std::io::Result<String> {
        Ok(self
            .state
            .create_session(DEFAULT_IDENTIFIER, "direct".to_owned(), timeout)?
            .id
            .clone())
    }

    /// Terminates a session as StopCodeInterpreterSession would.
    pub fn terminate(&self, id: &str) -> bool {
        match self.state.session(id) {
            Some(s) => {
                s.terminate();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
