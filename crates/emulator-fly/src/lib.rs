#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Fly Machines: the Machines API's exec route and the machine lifecycle an exec client needs.
//!
//! Routes (all JSON, `Authorization: Bearer <tok>`, `FlyV1 <tok>` or `Bearer FlyV1 <tok>`):
//!
//! - `POST /v1/apps/{app}/machines/{id}/exec`: `MachineExecRequest` → `200 flydv1.ExecResponse`,
//!   **also when the command failed** (its `exit_code` says so). argv from `command`, or the
//!   deprecated `cmd` split shell-words style; run without a shell in the machine's sandbox, cwd
//!   `/`; `stdin` written then closed (absent: `/dev/null`); `timeout` seconds (default
//!   [`FlyOptions::default_timeout`]). Zero values are omitted ([`FlyOptions::omit_empty`]); a
//!   signal death is `exit_code: -1, exit_signal: N`; invalid UTF-8 becomes U+FFFD as Go's JSON
//!   encoder writes it; a response over 10 MiB is the API's output-limit error. Route name for
//!   faults: `exec`.
//! - The Apps API: `POST /v1/apps`, `GET /v1/apps?org_slug=`, `GET|DELETE /v1/apps/{app}`.
//!   Machines live in an app that exists: every machine route of an unknown app is 404
//!   `{"error":"app not found"}` (no app is created implicitly). [`DEFAULT_APP`] exists at start.
//! - `GET /v1/apps/{app}/machines`, `POST /v1/apps/{app}/machines` (create; `skip_launch`;
//!   `config.init` is the main process), `GET|POST|DELETE /v1/apps/{app}/machines/{id}` (get,
//!   update, destroy), `POST …/start|stop|suspend|restart|signal`, `GET …/ps`, `GET …/events`,
//!   `GET …/metadata`, `POST|DELETE …/metadata/{key}`,
//!   `GET …/wait?state=&timeout=&instance_id=` (1–60 s, 408 on timeout),
//!   `POST|GET|DELETE …/lease` (409 while someone else holds it, on exec and on every call fly-go
//!   sends the nonce with). See `docs/adapters/fly.md` for the table and its sources.
//!
//! Each machine is a [`Sandbox`] whose private paths are `/root`, `/tmp` and `/data`; its
//! environment has `HOME=/root`, a standard `PATH`, and Fly's runtime variables (`FLY_APP_NAME`,
//! `FLY_MACHINE_ID`, `FLY_ALLOC_ID`, `FLY_REGION`, `FLY_PROCESS_GROUP`) plus `config.env` of the
//! create request. Stopping a machine destroys its sandbox (processes killed; a started machine
//! is "completely reset", as Fly's docs say); suspending keeps it, frozen (the cgroup freezer:
//! Fly's suspend is a memory snapshot, nothing runs until start resumes it).
//!
//! What is inferred rather than documented (see `docs/adapters/fly.md`): the 412 for exec on a
//! machine that is not started, the 408 `deadline_exceeded` body for a timed-out command
//! ([`TimeoutMode`]), the 400 status of the output-limit error, and the 401 body.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

mod routes;
pub mod wire;

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use execseam_core::{Command, Event, ExecStream, Exit};
use serde_json::{Value, json};
use tokio::sync::watch;

use axum::Router;
use execseam_emulator_kit::util::{hex_id, rfc3339};
use execseam_emulator_kit::{
    Dir, Emulator, FAULT_NAMES, FaultHandle, Provider, Rendered, Sandbox, SandboxEntry,
    SandboxSpec, Sandboxing, Shell, User,
};

/// A JSON object's string values.
pub(crate) fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A lowercase alphanumeric id, as Fly's app ids look (`z4k69dxd8r31p5mx`).
fn util_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    hex_id(len * 2)
        .as_bytes()
        .chunks(2)
        .map(|c| {
            let n = u8::from_str_radix(std::str::from_utf8(c).unwrap_or("0"), 16).unwrap_or(0);
            ALPHABET[n as usize % ALPHABET.len()] as char
        })
        .collect()
}

/// The app the default machine belongs to (it exists at start).
pub const DEFAULT_APP: &str = "execseam-emulated";
/// The org of the apps the emulator creates by itself (`personal`, the slug of a user's own org).
pub const DEFAULT_ORG: &str = "personal";
/// The image of a machine whose config names none.
pub const DEFAULT_IMAGE: &str = "registry-1.docker.io/library/debian:stable";
/// The token put in [`Emulator::env`] when the emulator accepts any token.
pub const PLACEHOLDER_TOKEN: &str = "fly-emulator-token";
/// The cwd of exec'd commands.
pub const DEFAULT_CWD: &str = "/";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the emulator does when an exec's `timeout` expires (the real answer is not documented).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutMode {
    /// The command is killed and the API answers `408 {"error":"deadline_exceeded: …"}` (the
    /// error text flyctl users reported).
    Error,
    /// The command is killed and the API answers 200 with `exit_signal: 9` and what was written.
    Signal,
}

/// Behaviour switches.
#[derive(Clone, Debug)]
pub struct FlyOptions {
    /// Omit zero values from `flydv1.ExecResponse`, as protobuf JSON does (default true).
    pub omit_empty: bool,
    /// What a timed-out exec answers.
    pub timeout_mode: TimeoutMode,
    /// The timeout of an exec that sends none (default 30 s).
    pub default_timeout: Duration,
    /// The response size limit after JSON encoding (default 10485760, the API's).
    pub max_response_bytes: usize,
    /// How long `starting`/`stopping` last (default 200 ms).
    pub transition: Duration,
}

impl Default for FlyOptions {
    fn default() -> Self {
        FlyOptions {
            omit_empty: true,
            timeout_mode: TimeoutMode::Error,
            default_timeout: Duration::from_secs(30),
            max_response_bytes: 10_485_760,
            transition: Duration::from_millis(200),
        }
    }
}

/// A lease on a machine.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    pub(crate) nonce: String,
    pub(crate) owner: String,
    pub(crate) description: String,
    pub(crate) expires: SystemTime,
    pub(crate) version: String,
}

/// An app (`POST /v1/apps`): machines live in one.
#[derive(Clone, Debug)]
pub(crate) struct App {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) org_slug: String,
    pub(crate) network: String,
    pub(crate) created: SystemTime,
}

/// The most events a machine keeps (newest first).
const MAX_EVENTS: usize = 64;

/// One emulated machine.
pub struct Machine {
    app: String,
    id: String,
    name: Mutex<String>,
    region: String,
    created: SystemTime,
    /// `config` as the last create or update sent it (`metadata` is kept apart).
    pub(crate) config: Mutex<Value>,
    /// `version` (changes on every update).
    pub(crate) version: Mutex<String>,
    /// `events`, newest first.
    pub(crate) events: Mutex<Vec<Value>>,
    instance_id: Mutex<String>,
    state: watch::Sender<String>,
    sandbox: Mutex<Option<Arc<Sandbox>>>,
    lease: Mutex<Option<Lease>>,
    sandboxing: Sandboxing,
    /// `config.metadata`.
    pub(crate) metadata: Mutex<BTreeMap<String, String>>,
    /// The main process's task, which records its `exit` event.
    main: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("app", &self.app)
            .field("id", &self.id)
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Machine {
    /// The app.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// The machine id (14 hex digits, as Fly's).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current state (`started`, `stopped`, …).
    pub fn state(&self) -> String {
        self.state.borrow().clone()
    }

    /// The running sandbox, if the machine has one (not after stop or destroy).
    pub fn sandbox(&self) -> Option<Arc<Sandbox>> {
        self.sandbox.lock().expect("sandbox").clone()
    }

    /// A machine path as the machine's commands see it (see [`Sandbox::visible_path`]).
    pub fn visible_path(&self, path: &str) -> String {
        match self.sandbox() {
            Some(s) => s.visible_path(path),
            None => path.to_owned(),
        }
    }

    /// Takes a lease for `owner` (as `POST …/lease` would) and returns its nonce.
    pub fn acquire_lease(&self, owner: &str, ttl: Duration) -> String {
        let nonce = hex_id(12);
        *self.lease.lock().expect("lease") = Some(Lease {
            nonce: nonce.clone(),
            owner: owner.to_owned(),
            description: String::new(),
            expires: SystemTime::now() + ttl,
            version: hex_id(26).to_uppercase(),
        });
        nonce
    }

    /// `config.image` (a default when the config names none).
    pub(crate) fn image(&self) -> String {
        self.config.lock().expect("config")["image"]
            .as_str()
            .unwrap_or(DEFAULT_IMAGE)
            .to_owned()
    }

    /// `config.env`.
    pub(crate) fn env(&self) -> BTreeMap<String, String> {
        string_map(&self.config.lock().expect("config")["env"])
    }

    /// The machine's name.
    pub fn name(&self) -> String {
        self.name.lock().expect("name").clone()
    }

    /// Records an event (`MachineEvent`: `type`, `status`, `source`, `timestamp` in ms).
    pub(crate) fn event(&self, kind: &str, status: &str, source: &str, request: Option<Value>) {
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut e = json!({
            "id": hex_id(26).to_uppercase(),
            "type": kind,
            "status": status,
            "source": source,
            "timestamp": ms,
        });
        if let Some(r) = request {
            e["request"] = r;
        }
        let mut events = self.events.lock().expect("events");
        events.insert(0, e);
        events.truncate(MAX_EVENTS);
    }

    /// The main process's argv: `config.init.exec`, else `init.entrypoint` + `init.cmd`.
    fn main_argv(&self) -> Vec<String> {
        let config = self.config.lock().expect("config");
        let list = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let init = &config["init"];
        let exec = list(&init["exec"]);
        if !exec.is_empty() {
            return exec;
        }
        let mut argv = list(&init["entrypoint"]);
        argv.extend(list(&init["cmd"]));
        argv
    }

    pub(crate) fn spec(&self) -> SandboxSpec {
        let image = self.image();
        let mut env: BTreeMap<String, String> = [
            ("PATH", PATH),
            ("FLY_APP_NAME", self.app.as_str()),
            ("FLY_MACHINE_ID", self.id.as_str()),
            ("FLY_ALLOC_ID", self.id.as_str()),
            ("FLY_REGION", self.region.as_str()),
            ("FLY_PROCESS_GROUP", "app"),
            ("FLY_IMAGE_REF", image.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        env.extend(self.env());
        // A Machine runs its image's processes as root; its hostname is the Machine's id.
        SandboxSpec::new("fly", &self.id, User::root(), env).dirs([Dir::root("/data")])
    }

    /// Boots the machine: a fresh sandbox (if none) running the main process of `config.init`
    /// (if any), state `started`.
    pub(crate) fn boot(self: &Arc<Self>) -> io::Result<()> {
        let mut sb = self.sandbox.lock().expect("sandbox");
        let fresh = sb.is_none();
        if let Some(suspended) = sb.as_ref().filter(|s| s.is_paused()) {
            // A suspended machine resumes where it was (its processes thaw).
            suspended.resume()?;
        }
        if fresh {
            *sb = Some(Sandbox::create(
                self.id.clone(),
                self.spec(),
                &self.sandboxing,
            )?);
        }
        let sandbox = sb.clone();
        drop(sb);
        self.set_state("started");
        self.event("start", "started", "flyd", None);
        if fresh && let Some(sandbox) = sandbox {
            self.spawn_main(&sandbox);
        }
        Ok(())
    }

    /// Runs the main process in `sandbox` until it exits (an `exit` event records how) or the
    /// sandbox goes.
    fn spawn_main(self: &Arc<Self>, sandbox: &Arc<Sandbox>) {
        let argv = self.main_argv();
        if argv.is_empty() {
            return;
        }
        let cmd = match Command::builder(argv)
            .workdir(sandbox.visible_path(DEFAULT_CWD))
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e.message(), "the machine's init is not a valid command");
                return;
            }
        };
        let exec = sandbox.exec().clone();
        let m = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            let Ok(mut stream) = exec.exec_stream(cmd).await else {
                return;
            };
            while let Some(ev) = stream.next().await {
                if let Ok(Event::Exit(exit)) = ev {
                    let (code, signal) = match exit {
                        Exit::Code(c) => (c, 0),
                        Exit::Signal(s) => (-1, s),
                    };
                    if let Some(m) = m.upgrade() {
                        m.event(
                            "exit",
                            "stopped",
                            "flyd",
                            Some(json!({"exit_event": {
                                "exit_code": code,
                                "guest_exit_code": code,
                                "guest_signal": signal,
                                "signal": signal,
                                "exited_at": rfc3339(SystemTime::now()),
                            }})),
                        );
                    }
                    return;
                }
            }
        });
        sandbox.track(task.abort_handle());
        *self.main.lock().expect("main") = Some(task);
    }

    /// Waits (at most `within`) for the main process's task to record its `exit` event: the
    /// process can be gone from the table before its stream's exit frame is read, and halting
    /// the sandbox then would abort the task before the event.
    pub(crate) async fn main_recorded(&self, within: Duration) {
        let task = self.main.lock().expect("main").take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(within, task).await;
        }
    }

    /// Kills everything and drops the sandbox.
    pub(crate) fn halt(&self, state: &str) {
        if self.sandbox.lock().expect("sandbox").is_some() {
            self.event(
                if state == "destroyed" {
                    "destroy"
                } else {
                    "stop"
                },
                state,
                "user",
                None,
            );
        }
        if let Some(s) = self.sandbox.lock().expect("sandbox").take() {
            // Thawed first, so a suspended machine's processes take their signals.
            let _ = s.resume();
            s.destroy();
        }
        self.set_state(state);
    }

    /// Sets the state (and wakes waiters).
    pub fn set_state(&self, state: &str) {
        self.state.send_replace(state.to_owned());
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<String> {
        self.state.subscribe()
    }
}

/// Destroying a machine halts it: processes killed, root removed.
impl SandboxEntry for Machine {
    fn teardown(&self) {
        self.halt("destroyed");
    }
}

pub(crate) struct State {
    pub(crate) shell: Arc<Shell<Fly>>,
    pub(crate) faults: FaultHandle,
    pub(crate) options: Mutex<FlyOptions>,
    pub(crate) apps: Mutex<BTreeMap<String, App>>,
    /// `(app, id)` of destroyed machines (a wait for `destroyed` on one answers at once).
    pub(crate) destroyed: Mutex<std::collections::BTreeSet<(String, String)>>,
}

impl State {
    pub(crate) fn options(&self) -> FlyOptions {
        self.options.lock().expect("options").clone()
    }

    pub(crate) fn machine(&self, app: &str, id: &str) -> Option<Arc<Machine>> {
        self.shell
            .sandboxes()
            .lock()
            .get(&(app.to_owned(), id.to_owned()))
            .cloned()
    }

    pub(crate) fn app(&self, name: &str) -> Option<App> {
        self.apps.lock().expect("apps").get(name).cloned()
    }

    /// Creates an app (false if the name is taken).
    pub(crate) fn create_app(&self, name: &str, org_slug: &str, network: &str) -> Option<App> {
        let mut apps = self.apps.lock().expect("apps");
        if apps.contains_key(name) {
            return None;
        }
        let app = App {
            id: util_id(16),
            name: name.to_owned(),
            org_slug: org_slug.to_owned(),
            network: if network.is_empty() {
                "default".to_owned()
            } else {
                network.to_owned()
            },
            created: SystemTime::now(),
        };
        apps.insert(name.to_owned(), app.clone());
        Some(app)
    }

    pub(crate) fn create_machine(
        &self,
        app: &str,
        name: Option<String>,
        region: Option<String>,
        config: Value,
        launch: bool,
    ) -> io::Result<Arc<Machine>> {
        let id = hex_id(14);
        let (state, _) = watch::channel("created".to_owned());
        let metadata = string_map(&config["metadata"]);
        let mut config = config;
        if let Some(c) = config.as_object_mut() {
            c.remove("metadata");
        } else {
            config = json!({});
        }
        let m = Arc::new(Machine {
            app: app.to_owned(),
            name: Mutex::new(name.unwrap_or_else(|| format!("emulated-{}", &id[..6]))),
            id: id.clone(),
            region: region.unwrap_or_else(|| "iad".to_owned()),
            created: SystemTime::now(),
            config: Mutex::new(config),
            version: Mutex::new(hex_id(26).to_uppercase()),
            events: Mutex::new(Vec::new()),
            instance_id: Mutex::new(hex_id(26).to_uppercase()),
            state,
            sandbox: Mutex::new(None),
            lease: Mutex::new(None),
            sandboxing: self.shell.sandboxing().clone(),
            metadata: Mutex::new(metadata),
            main: Mutex::new(None),
        });
        m.event("launch", "created", "user", None);
        if launch {
            m.boot()?;
        }
        self.shell
            .sandboxes()
            .lock()
            .insert((app.to_owned(), id), m.clone());
        Ok(m)
    }

    /// Destroys a machine: processes killed, root removed, gone from the API.
    pub(crate) fn destroy(&self, app: &str, id: &str) -> bool {
        let m = self
            .shell
            .sandboxes()
            .remove(&(app.to_owned(), id.to_owned()));
        match m {
            Some(m) => {
                m.halt("destroyed");
                self.destroyed
                    .lock()
                    .expect("destroyed")
                    .insert((app.to_owned(), id.to_owned()));
                true
            }
            None => false,
        }
    }
}

/// The Fly Machines provider emulator ([`Provider`]); its typed test accessors are reached
/// through [`FlyEmulator`] (`Deref`).
pub struct Fly {
    state: Arc<State>,
    default_machine: Arc<Machine>,
}

/// A running Fly Machines emulator.
pub type FlyEmulator = Emulator<Fly>;

impl Provider for Fly {
    const NAME: &'static str = "fly";
    /// Every fault on `exec` only.
    const FAULTS: Rendered = &[("exec", FAULT_NAMES)];
    const PLACEHOLDER_TOKEN: &'static str = PLACEHOLDER_TOKEN;
    const SCRATCH: &'static str = "/tmp/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "0000000000dead";
    type Options = FlyOptions;
    type Sandbox = Machine;
    /// `(app, machine id)`.
    type Key = (String, String);

    /// One started machine in app [`DEFAULT_APP`] exists from the start.
    async fn start(shell: Arc<Shell<Fly>>, fly: FlyOptions) -> io::Result<(Fly, Router)> {
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
            options: Mutex::new(fly),
            apps: Mutex::new(BTreeMap::new()),
            destroyed: Mutex::new(std::collections::BTreeSet::new()),
        });
        // The app a user's existing Fly app stands for (the adapter is configured with one).
        state.create_app(DEFAULT_APP, DEFAULT_ORG, "");
        let default_machine = state.create_machine(DEFAULT_APP, None, None, json!({}), true)?;
        let router = routes::router(state.clone());
        Ok((
            Fly {
                state,
                default_machine,
            },
            router,
        ))
    }

    /// What the adapter's `FlyConfig::from_env` (and fly-go, for the base URL and the token)
    /// reads, and the default machine as the sandbox `execseam run` connects to.
    fn env(&self, shell: &Shell<Fly>) -> Vec<(String, String)> {
        vec![
            ("FLY_FLAPS_BASE_URL".into(), shell.base_url().to_owned()),
            (
                "FLY_API_TOKEN".into(),
                shell.token().advertised().to_owned(),
            ),
            ("FLY_APP_NAME".into(), self.default_machine.app.clone()),
            ("EXECSEAM_SANDBOX".into(), self.default_machine.id.clone()),
        ]
    }
}

impl Fly {
    /// The machine created at start.
    pub fn default_machine(&self) -> Arc<Machine> {
        self.default_machine.clone()
    }

    /// Creates and starts a machine in `app`, which must exist ([`create_app`](Self::create_app)).
    pub fn create_machine(&self, app: &str) -> io::Result<Arc<Machine>> {
        if self.state.app(app).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("app {app} does not exist"),
            ));
        }
        self.state.create_machine(app, None, None, json!({}), true)
    }

    /// Creates an app in org [`DEFAULT_ORG`] (as `POST /v1/apps` does); false if the name is
    /// taken.
    pub fn create_app(&self, name: &str) -> bool {
        self.state.create_app(name, DEFAULT_ORG, "").is_some()
    }

    /// A machine by app and id.
    pub fn machine(&self, app: &str, id: &str) -> Option<Arc<Machine>> {
        self.state.machine(app, id)
    }

    /// Stops a machine (as `POST …/stop` does, without the transition delay).
    pub fn stop_machine(&self, machine: &Machine) {
        machine.halt("stopped");
    }

    /// Changes the behaviour switches.
    pub fn set_options(&self, f: impl FnOnce(&mut FlyOptions)) {
        f(&mut self.state.options.lock().expect("options"));
    }

    /// How many exec requests arrived.
    pub fn exec_requests(&self) -> u64 {
        self.state.faults.count("exec")
    }
}
