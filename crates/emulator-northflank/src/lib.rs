#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Northflank: the exec WebSocket and the REST routes its clients call around it.
//!
//! Sources: the Python SDK `northflank` 2.1.0 (`northflank/_protocols/__init__.py`: exec, log
//! tail, file copy; `endpoint.py`: REST envelope and errors; `_types.py`), the JS client
//! `@northflank/js-client` 0.9.5 (`dist/esm/api-client.js`: `ExecCommandStandard`, `execCommand`,
//! the log tail), and Northflank's "Execute commands" docs (mirrored in `northflank/skills`).
//! Details and what is inferred: `docs/adapters/northflank.md`.
//!
//! Exec (`GET /v1/command-exec/[teams/{t}/]projects/{p}/{services|jobs}/{id}`, a WebSocket; one
//! JSON object per text frame; no auth header):
//! - client `{"type":"init","data":{"auth":{"type":"apiToken","apiToken"},"context":{command
//!   (string or argv), shell ("none": exec'd directly; else e.g. "bash -c" + the command as one
//!   string; absent: bash, then sh), encoding ("utf-8" | "base64"), tty, user, group,
//!   instanceName, containerName}}}`; the server answers `{"type":"init","data":{"auth":
//!   "successful","context":{instanceName, containerName}}}` (a bad token: `auth: "failed"` with a
//!   `message`, then close).
//! - `payload` frames are stdin (base64-decoded with `encoding: base64`), `stdInEnd` closes it,
//!   in order, even when they arrive before the init reply (the Python one-shot sends `init` and
//!   `stdInEnd` back to back). The JS one-shot never sends `stdInEnd`: a command that reads stdin
//!   waits for it, as on the real service.
//! - output: `stdOut`/`stdErr` frames (UTF-8 text, split sequences joined, or base64 chunks each
//!   decodable alone); then `completion {exitCode, status: "Success"|"Failure"}` and a 1000
//!   close. `exitCode` follows [`ExitCodeJson`]: by default the number `0` for a success and a
//!   string (`"42"`) otherwise. Both official clients are needed to see why: the Python SDK's
//!   `_coerce_exit_code` says the proxy sends `"42"` "in practice", while the JS client's own file
//!   copy tests `commandResult.exitCode === 0` (a number) after `test -e`, which would never hold
//!   if a success were a string. A proxy that relays the Kubernetes exec status (no cause on
//!   success; the exit code as the string message of an `ExitCode` cause on failure) gives both.
//! - `tty: true` runs the command under a real pseudo-terminal (`script(1)`): stdout and stderr
//!   merge into `stdOut`, with the terminal's line endings. The docs' "output discarded when
//!   stdout is not a TTY" is about the `northflank exec` CLI, not this protocol: not reproduced.
//!
//! REST (`Authorization: Bearer`; `{"data": …}`; errors `{"error":{"status","message"}}`; every
//! route also under `/v1/teams/{t}`): `GET /v1/projects/{p}/services[/{id}[/containers]]`,
//! `GET /v1/projects/{p}/jobs[/{id}]`, `POST|GET /v1/projects/{p}/jobs/{id}/runs`,
//! `GET …/jobs/{id}/runs/{run}`, and `GET …/{services|jobs}/{id}/logs` (`queryType=range`: JSON;
//! with a WebSocket upgrade, `queryType=tail`: an `init` handshake, then `log-lines` frames).
//! A job run executes `deployment.docker.customCommand` with `sh -c` (or the job's command), its
//! output merged into log lines as container logs are.
//!
//! Every service and job is its own sandbox (the container: own pid, mount and UTS namespaces,
//! an overlay root, hostname = the instance name): user `root`, `HOME=/root`, working directory
//! `/app`.
//!
//! Faults on route `"exec"` (the WebSocket upgrade): 429 with `Retry-After` and 503 before the
//! upgrade, the connection dropped once the `init` frame (the command) arrived (reset),
//! `auth: "failed"`, 500 = the command runs and an `error` frame replaces the
//! completion, a normal close before the completion (cut), a non-JSON frame (malformed),
//! latency, and the container vanishing mid-command (the socket closes with 1011, no completion).
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

mod exec;
mod rest;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::Router;
use execseam_emulator_kit::clock::{self, Fraction};
use execseam_emulator_kit::{
    Dir, Emulator, FAULT_NAMES, FaultHandle, Provider, Rendered, Sandbox, SandboxEntry,
    SandboxSpec, Shell, User,
};

/// The token put in [`Emulator::env`] when the emulator accepts any token.
pub const PLACEHOLDER_TOKEN: &str = "nf-emulator-token";
/// The team of the team-scoped routes.
pub const TEAM_ID: &str = "execseam-team";
/// The project that exists at start.
pub const PROJECT_ID: &str = "execseam";
/// The service that exists at start.
pub const SERVICE_ID: &str = "sandbox";
/// The job that exists at start.
pub const JOB_ID: &str = "sandbox-job";
/// An unprivileged account of the emulated image (the docs' `USER northflank`), uid 1000.
pub const EXTRA_USER: &str = "northflank";
/// The container's working directory.
pub const WORKDIR: &str = "/app";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How `completion.exitCode` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCodeJson {
    /// `0` (a number) for a success, `"N"` (a string) otherwise (the default; see the module
    /// docs for the evidence).
    NumberOnSuccess,
    /// Always a string.
    String,
    /// Always a number, as the client types say.
    Number,
}

/// Behaviour switches.
#[derive(Clone, Debug)]
pub struct NorthflankOptions {
    /// How `completion.exitCode` is written.
    pub exit_code: ExitCodeJson,
    /// What a job run executes when it gives no `customCommand` (`sh -c` this).
    pub job_command: String,
}

impl Default for NorthflankOptions {
    fn default() -> Self {
        NorthflankOptions {
            exit_code: ExitCodeJson::NumberOnSuccess,
            job_command: "echo job ran".into(),
        }
    }
}

/// A service or a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `services/{id}`.
    Service,
    /// `jobs/{id}`.
    Job,
}

/// One service or job: its container (a sandbox), its instance name, its job runs.
pub struct Entity {
    pub(crate) kind: Kind,
    pub(crate) project: String,
    pub(crate) id: String,
    pub(crate) uid: String,
    pub(crate) created: SystemTime,
    pub(crate) instance: String,
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) runs: Mutex<Vec<Arc<rest::JobRun>>>,
}

execseam_emulator_kit::debug_fields!(Entity: kind, id);

impl Entity {
    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The instance (pod) name the exec handshake reports.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The container.
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// The container name the exec handshake reports (Northflank names the container after the
    /// service or job).
    pub fn container(&self) -> &str {
        &self.id
    }
}

/// A service's or job's container ends with it.
impl SandboxEntry for Entity {
    fn teardown(&self) {
        self.sandbox.destroy();
    }
}

pub(crate) struct State {
    pub(crate) shell: Arc<Shell<Northflank>>,
    pub(crate) faults: FaultHandle,
    pub(crate) options: Mutex<NorthflankOptions>,
}

impl State {
    pub(crate) fn options(&self) -> NorthflankOptions {
        self.options.lock().expect("options").clone()
    }

    pub(crate) fn accepts(&self, token: &str) -> bool {
        self.shell.token().accepts(token)
    }

    pub(crate) fn entity(&self, project: &str, kind: Kind, id: &str) -> Option<Arc<Entity>> {
        self.shell
            .sandboxes()
            .lock()
            .get(&(project.to_owned(), kind, id.to_owned()))
            .cloned()
    }

    pub(crate) fn list(&self, project: &str, kind: Kind) -> Vec<Arc<Entity>> {
        self.shell
            .sandboxes()
            .lock()
            .values()
            .filter(|e| e.project == project && e.kind == kind)
            .cloned()
            .collect()
    }

    pub(crate) fn has_project(&self, project: &str) -> bool {
        self.shell
            .sandboxes()
            .lock()
            .keys()
            .any(|(p, _, _)| p == project)
    }

    fn add(&self, project: &str, kind: Kind, id: &str) -> io::Result<Arc<Entity>> {
        let instance = match kind {
            Kind::Service => format!("{id}-{}-{}", clock::hex_id(9), clock::hex_id(5)),
            Kind::Job => format!("{id}-{}", clock::hex_id(5)),
        };
        // The image's user is root (the docs: "the user set by the parent image (for example
        // root for Alpine Linux)"); the pod's hostname is the instance name, as Kubernetes sets it.
        let env = [("PATH", PATH), ("HOSTNAME", instance.as_str())];
        // The docs' example of a Dockerfile user, `USER northflank`, exists too (uid 1000) for
        // the `user` field of exec.
        let spec = SandboxSpec::new("northflank", &instance, User::root(), env)
            .other_users([User::new(EXTRA_USER, 1000, "/home/northflank")])
            .dirs([Dir::root(WORKDIR)]);
        let sandbox = Sandbox::create(format!("{project}/{id}"), spec, self.shell.sandboxing())?;
        let e = Arc::new(Entity {
            kind,
            project: project.to_owned(),
            id: id.to_owned(),
            uid: clock::hex_id(6),
            created: SystemTime::now(),
            instance,
            sandbox,
            runs: Mutex::new(Vec::new()),
        });
        self.shell
            .sandboxes()
            .lock()
            .insert((project.to_owned(), kind, id.to_owned()), e.clone());
        Ok(e)
    }
}

/// An ISO 8601 UTC timestamp with milliseconds.
pub(crate) fn iso(t: SystemTime) -> String {
    clock::rfc3339(t, Fraction::Millis)
}

/// The Northflank provider emulator ([`Provider`]); its typed test accessors are reached
/// through [`NorthflankEmulator`] (`Deref`).
pub struct Northflank {
    state: Arc<State>,
}

/// A running Northflank emulator.
pub type NorthflankEmulator = Emulator<Northflank>;

impl Provider for Northflank {
    const NAME: &'static str = "northflank";
    /// Every fault on `exec` (the exec WebSocket upgrade).
    const FAULTS: Rendered = &[("exec", FAULT_NAMES)];
    const PLACEHOLDER_TOKEN: &'static str = PLACEHOLDER_TOKEN;
    const SCRATCH: &'static str = "/app/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "no-such-service";
    type Options = NorthflankOptions;
    type Sandbox = Entity;
    /// `(project, kind, id)`.
    type Key = (String, Kind, String);

    /// Project [`PROJECT_ID`], service [`SERVICE_ID`] and job [`JOB_ID`] exist from the start.
    async fn start(
        shell: Arc<Shell<Northflank>>,
        northflank: NorthflankOptions,
    ) -> io::Result<(Northflank, Router)> {
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
            options: Mutex::new(northflank),
        });
        state.add(PROJECT_ID, Kind::Service, SERVICE_ID)?;
        state.add(PROJECT_ID, Kind::Job, JOB_ID)?;
        let router = rest::router(state.clone());
        Ok((Northflank { state }, router))
    }

    /// The environment the Python SDK (`NORTHFLANK_API_TOKEN`, `NORTHFLANK_API_BASE_URL`) and
    /// the adapter's `from_env` (those plus `NORTHFLANK_PROJECT_ID`) read; the service as the
    /// sandbox `execseam run` connects to (`EXECSEAM_SANDBOX`: Northflank is connect-only) and
    /// as the live conformance target names it (`NORTHFLANK_SERVICE_ID`). The API base is also
    /// the JS context's `host`; exec is `ws://` on the same port.
    fn env(&self, shell: &Shell<Northflank>) -> Vec<(String, String)> {
        vec![
            (
                "NORTHFLANK_API_BASE_URL".into(),
                shell.base_url().to_owned(),
            ),
            (
                "NORTHFLANK_API_TOKEN".into(),
                shell.token().advertised().to_owned(),
            ),
            ("NORTHFLANK_PROJECT_ID".into(), PROJECT_ID.into()),
            ("NORTHFLANK_SERVICE_ID".into(), SERVICE_ID.into()),
            ("EXECSEAM_SANDBOX".into(), SERVICE_ID.into()),
        ]
    }
}

impl Northflank {
    /// Adds a service (its own container) to a project.
    pub fn add_service(&self, project: &str, id: &str) -> io::Result<Arc<Entity>> {
        self.state.add(project, Kind::Service, id)
    }

    /// A service or job.
    pub fn entity(&self, project: &str, kind: Kind, id: &str) -> Option<Arc<Entity>> {
        self.state.entity(project, kind, id)
    }

    /// Changes the behaviour switches.
    pub fn set_options(&self, f: impl FnOnce(&mut NorthflankOptions)) {
        f(&mut self.state.options.lock().expect("options"));
    }

    /// How many exec WebSocket upgrades arrived.
    pub fn exec_requests(&self) -> u64 {
        self.state.faults.count("exec")
    }
}
