#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! E2B: the control plane (`/v2/sandboxes`, `/sandboxes/{id}`, …, `X-API-KEY`) and, on the same
//! port, envd as seen through E2B's edge proxy (routing by `E2b-Sandbox-Id`/`E2b-Sandbox-Port` or
//! by `Host: 49983-<id>.<domain>`; the proxy's `502 "The sandbox was not found"` for a sandbox
//! that is gone), speaking the Connect protocol with the JSON codec (`process.Process/*`,
//! `filesystem.Filesystem/*`) and envd's plain routes (`/files`, `/health`, `/envs`).
//!
//! Follows `../shared/research/e2b-daytona.md` part A and envd's source
//! (`infra/packages/envd`): envd version `0.6.13` is reported so the official SDK enables its
//! features; proto3 JSON with defaults omitted, int64 as strings, base64 bytes; the sandbox's home
//! is `/home/user` with `HOME`, `USER`, `LOGNAME` and `PATH` set as envd sets them.
//!
//! Faults on route `"exec"` (`process.Start`): the nine of the harness, rendered the way E2B's
//! proxy or envd would answer, plus [`StreamFault`]s armed through [`E2bEmulator`]: an in-stream
//! Connect error and a stream that ends without its end event. The control plane's create call
//! takes faults on route `"create"`.
//!
//! Users: `user` (uid 1000, home `/home/user`, the default) and `root`. With namespaces (the
//! emulator runs as root) commands run as the selected user (`setpriv`) and the files API gives
//! what it creates to that user, as envd does; without, everything runs as the emulator's user.
//! The host's `/etc/passwd` is the sandbox's, so `whoami` names uid 1000 as the host does.
//!
//! PTYs: a `Start` with `pty` runs on a real terminal of the sandbox
//! ([`execseam_emulator_kit::Sandbox::spawn_pty`]), with `pty` output, input and `Update` resizes (see
//! `process.rs`).
//!
//! Not emulated: users other than `user` and `root`.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State as AxState};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::time::Instant;

use execseam_emulator_kit::{
    BodyLimit, ConnControl, Emulator, FAULT_NAMES, Fault, FaultHandle, Provider, Rendered, Sandbox,
    SandboxEntry, SandboxSpec, Shell, stream_then_drain,
};

mod connect;
mod fs;
mod process;
mod snapshots;
pub mod time;
mod watch;

/// The envd version reported (≥ 0.6.4 enables every feature of the SDK 2.x).
pub const ENVD_VERSION: &str = "0.6.13";
/// envd's port.
pub const ENVD_PORT: u16 = 49983;
/// `PATH` in envd's own environment on E2B's base template.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The default user and its home.
pub const DEFAULT_USER: &str = "user";
/// The default user's home.
pub const HOME: &str = "/home/user";
/// The hostname of every E2B sandbox.
pub const HOSTNAME: &str = "e2b.local";

/// A fault of `process.Start` beyond the harness's nine, armed with
/// [`E2bEmulator::arm_stream_fault`] for the next `Start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamFault {
    /// Right after the start event, end the stream with this Connect error (HTTP 200 and an
    /// end-stream envelope); the process keeps running.
    Error {
        /// The Connect code (`internal`, `unavailable`, …).
        code: &'static str,
        /// The message.
        message: String,
    },
    /// Stream the output, then end the stream successfully (`{}`) without the end event.
    NoEndEvent,
    /// Start the process, then cut the stream before its start event (a start envd ran whose
    /// answer was lost on the way back), for the next `Start` whose tag begins with
    /// `tag_prefix` (other `Start`s leave it armed).
    CutBeforeStart {
        /// The tag's beginning.
        tag_prefix: String,
    },
}

/// A sandbox created directly through the typed handle.
#[derive(Clone, Debug)]
pub struct SandboxCreated {
    /// Its id.
    pub sandbox_id: String,
    /// Its `envdAccessToken`.
    pub envd_access_token: String,
    /// The envd version reported.
    pub envd_version: String,
}

/// One emulated sandbox: the registry's entry.
pub struct Sbx {
    id: String,
    template: String,
    token: String,
    sandbox: Arc<Sandbox>,
    env_vars: BTreeMap<String, String>,
    metadata: BTreeMap<String, String>,
    started_at: SystemTime,
    end_at: Mutex<(Instant, SystemTime)>,
    procs: Mutex<HashMap<u32, Arc<process::Proc>>>,
    /// Ended processes' end events, each kept [`process::TERMINATED_RETENTION`] for a late
    /// `Connect`.
    terminated: Mutex<HashMap<u32, process::Retained>>,
    /// Set (before its processes are killed) when the sandbox goes away: its open streams end
    /// the way the proxy ends them, not with the killed processes' end events.
    gone: tokio::sync::watch::Sender<bool>,
    /// Paused (`POST /sandboxes/{id}/pause`): its processes are stopped (`SIGSTOP`), envd is
    /// unreachable through the proxy, its timeout does not run; `connect` resumes it.
    paused: std::sync::atomic::AtomicBool,
    /// envd's directory watchers (`CreateWatcher`).
    watchers: Mutex<HashMap<String, Arc<watch::Watcher>>>,
}

impl Sbx {
    fn is_paused(&self) -> bool {
        self.paused.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn set_lifetime(&self, timeout: Duration) {
        *self.end_at.lock().expect("end_at") =
            (Instant::now() + timeout, SystemTime::now() + timeout);
    }

    fn kill_all(&self) {
        self.gone.send_replace(true);
        let procs: Vec<_> = self
            .procs
            .lock()
            .expect("procs")
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in procs {
            p.kill_group();
        }
        self.sandbox.destroy();
    }
}

impl SandboxEntry for Sbx {
    /// A paused sandbox's timeout does not run.
    fn expired(&self, now: Instant) -> bool {
        !self.is_paused() && self.end_at.lock().expect("end_at").0 <= now
    }

    fn teardown(&self) {
        self.kill_all();
    }
}

impl Drop for Sbx {
    fn drop(&mut self) {
        self.kill_all();
    }
}

pub(crate) struct State {
    shell: Arc<Shell<E2b>>,
    faults: FaultHandle,
    stream_faults: Mutex<VecDeque<StreamFault>>,
    /// Snapshot templates (`POST /sandboxes/{id}/snapshots`), by snapshot id.
    snapshots: Mutex<BTreeMap<String, snapshots::Snap>>,
}

fn random_u64() -> u64 {
    execseam_emulator_kit::clock::random_u64()
}

fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let mut n = random_u64();
        for _ in 0..12 {
            if s.len() == len {
                break;
            }
            s.push(ALPHABET[(n % 36) as usize] as char);
            n /= 36;
        }
    }
    s
}

impl State {
    /// Creates a sandbox of `template`, its files starting as `layer` left them (a snapshot
    /// template or a fork) or as the template's.
    fn create_over(
        &self,
        template: &str,
        timeout: Duration,
        env_vars: BTreeMap<String, String>,
        metadata: BTreeMap<String, String>,
        layer: Option<&execseam_emulator_kit::Snapshot>,
    ) -> std::io::Result<Arc<Sbx>> {
        let id = format!("i{}", random_id(19));
        // E2B's base template: `user` (uid 1000, in sudo) and root; hostname `e2b.local`.
        let user = execseam_emulator_kit::User::new(DEFAULT_USER, USER_UID, HOME).groups(["sudo"]);
        let spec = SandboxSpec::new("e2b", HOSTNAME, user, [("PATH", DEFAULT_PATH)])
            .other_users([execseam_emulator_kit::User::root()]);
        let sandbox = match layer {
            Some(l) => Sandbox::create_from(id.clone(), spec, self.shell.sandboxing(), l)?,
            None => Sandbox::create(id.clone(), spec, self.shell.sandboxing())?,
        };
        let sbx = Arc::new(Sbx {
            id: id.clone(),
            template: template.to_owned(),
            token: format!("{:016x}{:016x}", random_u64(), random_u64()),
            sandbox,
            env_vars,
            metadata,
            started_at: SystemTime::now(),
            end_at: Mutex::new((Instant::now(), SystemTime::now())),
            procs: Mutex::new(HashMap::new()),
            terminated: Mutex::new(HashMap::new()),
            gone: tokio::sync::watch::channel(false).0,
            paused: std::sync::atomic::AtomicBool::new(false),
            watchers: Mutex::new(HashMap::new()),
        });
        sbx.set_lifetime(timeout);
        self.shell.sandboxes().insert(id, sbx.clone());
        Ok(sbx)
    }

    fn get(&self, id: &str) -> Option<Arc<Sbx>> {
        self.shell.sandboxes().get(id)
    }

    /// Removes the sandbox and kills everything in it.
    pub(crate) fn kill(&self, id: &str) -> bool {
        self.shell.sandboxes().destroy(id)
    }

    fn key_ok(&self, headers: &HeaderMap) -> bool {
        let got = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        self.shell.token().accepts(got)
    }
}

/// The E2B provider emulator ([`Provider`]); its typed test accessors are reached through
/// [`E2bEmulator`] (`Deref`).
pub struct E2b {
    state: Arc<State>,
}

/// A running E2B emulator.
pub type E2bEmulator = Emulator<E2b>;

impl Provider for E2b {
    const NAME: &'static str = "e2b";
    /// Every fault on `exec` (`process.Start`); the control plane's on `create`.
    const FAULTS: Rendered = &[
        ("exec", FAULT_NAMES),
        ("create", &["429", "500", "503", "auth", "reset", "latency"]),
    ];
    const PLACEHOLDER_TOKEN: &'static str = "e2b_emulator_key";
    const SCRATCH: &'static str = "/home/user/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "inosuchsandbox000000";
    type Options = ();
    type Sandbox = Sbx;
    type Key = String;

    async fn start(shell: Arc<Shell<E2b>>, (): ()) -> std::io::Result<(E2b, Router)> {
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
            stream_faults: Mutex::new(VecDeque::new()),
            snapshots: Mutex::new(BTreeMap::new()),
        });
        Ok((
            E2b {
                state: state.clone(),
            },
            router(state),
        ))
    }

    /// `E2B_API_URL` and `E2B_SANDBOX_URL` (the control plane and every sandbox: this
    /// emulator), `E2B_API_KEY`, `E2B_DOMAIN`.
    fn env(&self, shell: &Shell<E2b>) -> Vec<(String, String)> {
        let base = shell.base_url().to_owned();
        vec![
            ("E2B_API_URL".into(), base.clone()),
            ("E2B_SANDBOX_URL".into(), base),
            ("E2B_API_KEY".into(), shell.token().advertised().to_owned()),
            ("E2B_DOMAIN".into(), "e2b.local".into()),
        ]
    }
}

impl E2b {
    /// The API key the emulator accepts (advertised in [`Emulator::env`]).
    pub fn api_key(&self) -> &str {
        self.state.shell.token().advertised()
    }

    /// Arms an E2B-specific fault for the next `process.Start` (after the harness's faults).
    pub fn arm_stream_fault(&self, fault: StreamFault) {
        self.state
            .stream_faults
            .lock()
            .expect("stream faults")
            .push_back(fault);
    }

    /// Creates a sandbox directly (no HTTP), with this lifetime.
    pub fn create_sandbox(&self, timeout: Duration) -> std::io::Result<SandboxCreated> {
        let s = self
            .state
            .create_over("base", timeout, BTreeMap::new(), BTreeMap::new(), None)?;
        Ok(SandboxCreated {
            sandbox_id: s.id.clone(),
            envd_access_token: s.token.clone(),
            envd_version: ENVD_VERSION.into(),
        })
    }

    /// Kills a sandbox as if its timeout fired; false if there was none.
    pub fn kill_sandbox(&self, id: &str) -> bool {
        self.state.kill(id)
    }

    /// The ids of the running sandboxes.
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.state.shell.sandboxes().keys()
    }

    /// Where a sandbox path lives on the host (for tests), if the sandbox runs.
    pub fn host_path(&self, id: &str, sandbox_path: &str) -> Option<std::path::PathBuf> {
        self.state
            .get(id)
            .map(|s| s.sandbox.host_path(sandbox_path))
    }

    /// A sandbox's harness handle (to inspect it from a test).
    pub fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.state.get(id).map(|s| s.sandbox.clone())
    }

    /// The pids of the processes envd tracks in a sandbox.
    pub fn processes(&self, id: &str) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .state
            .get(id)
            .map(|s| s.procs.lock().expect("procs").keys().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }
}

// ------------------------------------------------------------------------------------------------
// Routing

fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/sandboxes", post(create::<15>).get(list))
        .route("/v2/sandboxes", post(create::<300>).get(list))
        .route("/sandboxes/{id}", get(get_sandbox).delete(kill_sandbox))
        .route("/sandboxes/{id}/connect", post(connect_sandbox))
        .route("/v2/sandboxes/{id}/connect", post(connect_sandbox))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/pause", post(snapshots::pause))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/snapshots", get(snapshots::list))
        .route("/templates/{id}", axum::routing::delete(snapshots::delete))
        .route("/sandboxes/{id}/metrics", get(metrics))
        .fallback(envd)
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// JSON with the charset the Go services send.
pub(crate) fn plain_json(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// The `{"code":<int>,"message"}` error of the control plane and envd's plain routes.
pub(crate) fn plain_error(status: StatusCode, message: impl Into<String>) -> Response {
    plain_json(
        status,
        json!({"code": status.as_u16(), "message": message.into()}),
    )
}

/// Renders a harness fault as E2B's edge would answer it; `None` means "serve normally"
/// (latency is applied here; the stream faults are the caller's). On a sandbox's routes
/// (`sandbox`: its id) a 429 is the proxy's own: the connection limiter's template, answered
/// in the proxy's handler before it forwards (e2b-infra
/// `packages/shared/pkg/proxy/template/sandbox_too_many_connections.go`: `{"sandboxId",
/// "message", "code": 429, "connectionLimit"}`); on the API, the API's `{"code", "message"}`.
async fn edge_fault(
    fault: Fault,
    ctl: Option<&ConnControl>,
    sandbox: Option<&str>,
) -> Option<Response> {
    match fault {
        Fault::RateLimited { retry_after_secs } => {
            let mut r = match sandbox {
                Some(id) => plain_json(
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({
                        "sandboxId": id,
                        "message": "The sandbox has too many concurrent incoming connections (limit: 1000)",
                        "code": 429,
                        "connectionLimit": 1000,
                    }),
                ),
                None => plain_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate limit exceeded, please try again later",
                ),
            };
            r.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(retry_after_secs),
            );
            Some(r)
        }
        Fault::Unavailable => Some(plain_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service unavailable",
        )),
        Fault::AuthFailure => Some(plain_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized access, please provide a valid access token or method signing if supported",
        )),
        Fault::ResetBeforeResponse => Some(execseam_emulator_kit::reset_connection(ctl).await),
        Fault::Latency(d) => {
            tokio::time::sleep(d).await;
            None
        }
        _ => None,
    }
}

fn sandbox_json(s: &Sbx) -> Value {
    json!({
        "templateID": s.template,
        "sandboxID": s.id,
        "clientID": "6532622b",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": s.token,
        "trafficAccessToken": null,
        "domain": null,
    })
}

fn detail_json(s: &Sbx) -> Value {
    let end = s.end_at.lock().expect("end_at").1;
    json!({
        "templateID": s.template,
        "sandboxID": s.id,
        "clientID": "6532622b",
        "startedAt": time::rfc3339(s.started_at),
        "endAt": time::rfc3339(end),
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 22_000,
        "state": if s.is_paused() { "paused" } else { "running" },
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": s.token,
        "domain": null,
        "metadata": s.metadata,
    })
}

/// A control-plane request with a valid API key (`x-api-key`; 401 otherwise).
pub(crate) struct Keyed(pub(crate) Arc<State>);

impl FromRequestParts<Arc<State>> for Keyed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Keyed, Response> {
        if !state.key_ok(&parts.headers) {
            return Err(unauthorized_key());
        }
        Ok(Keyed(state.clone()))
    }
}

/// A keyed request for the sandbox its path's `{id}` names (404 when there is none): the id and
/// the sandbox.
pub(crate) struct Addressed(pub(crate) String, pub(crate) Arc<Sbx>);

impl FromRequestParts<Arc<State>> for Addressed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Self, Response> {
        let Keyed(state) = Keyed::from_request_parts(parts, state).await?;
        let Path(id) = Path::<String>::from_request_parts(parts, &state)
            .await
            .map_err(IntoResponse::into_response)?;
        match state.get(&id) {
            Some(s) => Ok(Addressed(id, s)),
            None => Err(not_found_sandbox(&id)),
        }
    }
}

fn not_found_sandbox(id: &str) -> Response {
    plain_error(
        StatusCode::NOT_FOUND,
        format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
    )
}

fn unauthorized_key() -> Response {
    plain_error(
        StatusCode::UNAUTHORIZED,
        "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.",
    )
}

/// A body that is empty (`null`) or JSON; otherwise 400 "Error when parsing request".
pub(crate) fn optional_json(body: &Bytes) -> Result<Value, Response> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body).map_err(|e| {
        plain_error(
            StatusCode::BAD_REQUEST,
            format!("Error when parsing request: {e}"),
        )
    })
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(|v| v.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `POST /sandboxes` and `POST /v2/sandboxes`: `DEFAULT_TIMEOUT` seconds when the body names
/// none (the legacy `NewSandbox` schema's default is 15 s, v2's 300 s).
async fn create<const DEFAULT_TIMEOUT: u64>(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    ctl: Option<axum::Extension<ConnControl>>,
    body: Bytes,
) -> Response {
    let ctl = ctl.map(|c| c.0);
    if let Some(f) = state.faults.take("create") {
        if f == Fault::ServerError {
            return plain_error(StatusCode::INTERNAL_SERVER_ERROR, "internal server error");
        }
        if let Some(r) = edge_fault(f, ctl.as_ref(), None).await {
            return r;
        }
    }
    if !state.key_ok(&headers) {
        return unauthorized_key();
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return plain_error(
            StatusCode::BAD_REQUEST,
            "request body has an error: not JSON",
        );
    };
    let Some(template) = req.get("templateID").and_then(|t| t.as_str()) else {
        return plain_error(
            StatusCode::BAD_REQUEST,
            "request body has an error: doesn't match schema: property \"templateID\" is missing",
        );
    };
    let timeout = req
        .get("timeout")
        .and_then(|t| t.as_u64())
        .unwrap_or(DEFAULT_TIMEOUT);
    // A snapshot template (`<template>:<tag>` or `<team>/<name>:<tag>`) starts from its layer;
    // one that does not exist is the template cache's 404 (`cache/templates/errors.go`).
    let layer = match snapshots::resolve(&state, template) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let created = tokio::task::spawn_blocking({
        let state = state.clone();
        let template = template.to_owned();
        let env_vars = string_map(req.get("envVars"));
        let metadata = string_map(req.get("metadata"));
        move || {
            state.create_over(
                &template,
                Duration::from_secs(timeout),
                env_vars,
                metadata,
                layer.as_ref(),
            )
        }
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match created {
        Ok(s) => plain_json(StatusCode::CREATED, sandbox_json(&s)),
        Err(e) => plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot create the sandbox: {e}"),
        ),
    }
}

async fn connect_sandbox(Addressed(_, s): Addressed, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // `handlers/sandbox_connect.go`: a running sandbox answers 200 (its timeout only ever
    // extended), a paused one is resumed with the timeout asked for (default 300 s) and
    // answers 201.
    if s.paused.load(std::sync::atomic::Ordering::SeqCst) {
        snapshots::thaw(&s).await;
        s.paused.store(false, std::sync::atomic::Ordering::SeqCst);
        let t = req.get("timeout").and_then(|t| t.as_u64()).unwrap_or(300);
        s.set_lifetime(Duration::from_secs(t));
        return plain_json(StatusCode::CREATED, sandbox_json(&s));
    }
    if let Some(t) = req.get("timeout").and_then(|t| t.as_u64()) {
        let want = Instant::now() + Duration::from_secs(t);
        if want > s.end_at.lock().expect("end_at").0 {
            s.set_lifetime(Duration::from_secs(t));
        }
    }
    plain_json(StatusCode::OK, sandbox_json(&s))
}

/// `GET /sandboxes/{id}/metrics`: one sample of now (`SandboxMetric`): the memory is the
/// resident size of the sandbox's processes, the disk what the sandbox wrote; CPU count, memory
/// and disk totals are the emulator's fixed sizes (those of `GET /sandboxes/{id}`).
async fn metrics(Addressed(_, s): Addressed) -> Response {
    let rss: u64 = s
        .sandbox
        .processes()
        .unwrap_or_default()
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/statm")).ok())
        .filter_map(|m| m.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum::<u64>()
        * 4096;
    fn du(p: &std::path::Path) -> u64 {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        if md.is_dir() {
            std::fs::read_dir(p)
                .map(|d| d.flatten().map(|e| du(&e.path())).sum())
                .unwrap_or(0)
        } else {
            md.len()
        }
    }
    let disk = s.sandbox.upper_dir().map_or(0, |u| du(&u));
    let now = SystemTime::now();
    let unix = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    plain_json(
        StatusCode::OK,
        json!([{
            "timestamp": time::rfc3339(now),
            "timestampUnix": unix,
            "cpuCount": 2,
            "cpuUsedPct": 0.0,
            "memUsed": rss,
            "memTotal": 512u64 << 20,
            "memCache": 0,
            "diskUsed": disk,
            "diskTotal": 22_000u64 << 20,
        }]),
    )
}

async fn get_sandbox(Addressed(_, s): Addressed) -> Response {
    plain_json(StatusCode::OK, detail_json(&s))
}

async fn kill_sandbox(Keyed(state): Keyed, Path(id): Path<String>) -> Response {
    if state.kill(&id) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        not_found_sandbox(&id)
    }
}

async fn set_timeout(Addressed(_, s): Addressed, body: Bytes) -> Response {
    let Some(t) = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("timeout").and_then(|t| t.as_u64()))
    else {
        return plain_error(
            StatusCode::BAD_REQUEST,
            "request body has an error: property \"timeout\" is missing",
        );
    };
    s.set_lifetime(Duration::from_secs(t));
    StatusCode::NO_CONTENT.into_response()
}

async fn list(Keyed(state): Keyed, Query(query): Query<BTreeMap<String, String>>) -> Response {
    // `metadata` is decoded as the API decodes it (infra `utils/sandboxes_list.go`
    // `parseFilters`): the value (already query-decoded once) is unescaped again, split on `&`
    // and `=`, and each key and value unescaped a third time; a pair without exactly one `=`
    // is a 400 "Error parsing metadata".
    let filter = match query.get("metadata").map(|m| parse_metadata_filter(m)) {
        None => None,
        Some(Some(f)) => Some(f),
        Some(None) => {
            return plain_error(StatusCode::BAD_REQUEST, "Error parsing metadata");
        }
    };
    // `state=running,paused` (both by default).
    let wanted = |paused: bool| {
        let name = if paused { "paused" } else { "running" };
        query
            .get("state")
            .is_none_or(|s| s.split(',').any(|s| s == name))
    };
    let all: Vec<Value> = state
        .shell
        .sandboxes()
        .lock()
        .values()
        .filter(|s| wanted(s.is_paused()))
        .filter(|s| {
            filter
                .as_ref()
                .is_none_or(|f| f.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        })
        .map(|s| detail_json(s))
        .collect();
    let total = all.len().to_string();
    let mut resp = plain_json(StatusCode::OK, Value::Array(all));
    if let Ok(v) = total.parse() {
        resp.headers_mut().insert("x-total-running", v);
    }
    resp
}

/// Go's `url.QueryUnescape`: `%XX` and `+` as a space; a bad escape is an error.
fn query_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn parse_metadata_filter(raw: &str) -> Option<BTreeMap<String, String>> {
    let query = query_unescape(raw)?;
    let mut filters = BTreeMap::new();
    for pair in query.split('&') {
        let parts: Vec<&str> = pair.split('=').collect();
        if parts.len() != 2 {
            return None;
        }
        filters.insert(query_unescape(parts[0])?, query_unescape(parts[1])?);
    }
    Some(filters)
}

// ------------------------------------------------------------------------------------------------
// envd behind the edge proxy

/// The sandbox a request is routed to: the `E2b-Sandbox-Id`/`E2b-Sandbox-Port` headers, else a
/// `Host` of the form `49983-<id>.<domain>`.
/// The sandbox and port a request is for: `E2b-Sandbox-Id` + `E2b-Sandbox-Port` (how the SDK
/// reaches a sandbox through `E2B_SANDBOX_URL`), or `Host: <port>-<id>.<domain>` (how E2B's edge
/// routes, and what `get_host(port)` names); `None` for the control plane.
fn route_sandbox(headers: &HeaderMap) -> Result<Option<(String, u16)>, Response> {
    let id = headers.get("e2b-sandbox-id").and_then(|v| v.to_str().ok());
    let port = headers
        .get("e2b-sandbox-port")
        .and_then(|v| v.to_str().ok());
    let bad_port = |id: &str, port: &str| {
        plain_json(
            StatusCode::BAD_GATEWAY,
            json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "port": port, "code": 502}),
        )
    };
    match (id, port) {
        (Some(id), Some(port)) => {
            let Ok(p) = port.parse::<u16>() else {
                return Err(bad_port(id, port));
            };
            return Ok(Some((id.to_owned(), p)));
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(plain_error(
                StatusCode::BAD_REQUEST,
                "missing header: both E2b-Sandbox-Id and E2b-Sandbox-Port are required",
            ));
        }
        (None, None) => {}
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let label = host.split('.').next().unwrap_or_default();
    if host.contains('.')
        && let Some((port, id)) = label.split_once('-')
        && let Ok(p) = port.parse::<u16>()
        && !id.is_empty()
    {
        return Ok(Some((id.to_owned(), p)));
    }
    Ok(None)
}

/// A port other than envd's, through the proxy (`client-proxy` → the orchestrator's proxy): the
/// sandbox's own server, or the proxy's 502s (`shared/pkg/proxy/template/port_closed.go`).
async fn sandbox_port(
    sbx: &Sbx,
    port: u16,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut req = http::Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    match execseam_emulator_kit::ports::forward(&sbx.sandbox, port, req).await {
        Ok(r) => r.into_response(),
        Err(execseam_emulator_kit::ports::PortError::Paused) => sandbox_not_found(&sbx.id),
        Err(_) => plain_json(
            StatusCode::BAD_GATEWAY,
            json!({"sandboxId": sbx.id, "message": "The sandbox is running but port is not open", "port": port.to_string(), "code": 502}),
        ),
    }
}

/// The proxy's answer for a sandbox that does not run.
pub(crate) fn sandbox_not_found(id: &str) -> Response {
    plain_json(
        StatusCode::BAD_GATEWAY,
        json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
    )
}

/// A request routed to one sandbox's envd.
pub(crate) struct EnvdRequest {
    pub state: Arc<State>,
    pub sbx: Arc<Sbx>,
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub ctl: Option<ConnControl>,
    pub body: Body,
}

async fn envd(
    AxState(state): AxState<Arc<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    ctl: Option<axum::Extension<ConnControl>>,
    limit: Option<axum::Extension<BodyLimit>>,
    body: Body,
) -> Response {
    // Every answer, errors included, comes after the whole request body has been read: a server
    // that answers early and leaves the body unread makes hyper close the connection, and a
    // client that pooled it (the SDK keeps its connections alive) then fails its next request
    // to a healthy sandbox with a transport error. The routes that envd reads whole (unary
    // calls, `Start`'s one message, uploads) are read whole here; `StreamInput`, which envd
    // reads one message at a time with no total bound, is handed over as it arrives and what
    // its handler leaves is drained.
    if method == Method::POST && uri.path() == "/process.Process/StreamInput" {
        return stream_then_drain(body, limit.as_deref(), |body| {
            envd_routed(state, method, uri, headers, ctl, body)
        })
        .await;
    }
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => Body::from(b),
        Err(e) => return plain_error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    envd_routed(state, method, uri, headers, ctl, body).await
}

/// An envd request, its body read ([`envd`]), routed to its sandbox.
async fn envd_routed(
    state: Arc<State>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    ctl: Option<axum::Extension<ConnControl>>,
    body: Body,
) -> Response {
    let (id, port) = match route_sandbox(&headers) {
        Ok(Some(routed)) => routed,
        Ok(None) => {
            // The control plane's own health route; anything else is unknown here.
            if method == Method::GET && uri.path() == "/health" {
                return (StatusCode::OK, "Health check successful").into_response();
            }
            // A signed `/files` URL from `download_url`/`upload_url`: with `E2B_SANDBOX_URL`
            // set (how the emulator is reached) the SDK builds it on that URL, so it names no
            // sandbox; the sandbox whose access token verifies the signature is the one meant
            // (the real service routes it by its `49983-<id>.<domain>` host instead).
            match (uri.path() == "/files")
                .then(|| fs::signed_sandbox(&state, &method, &uri))
                .flatten()
            {
                Some(id) => (id, ENVD_PORT),
                None => return plain_error(StatusCode::NOT_FOUND, "not found"),
            }
        }
        Err(r) => return r,
    };
    // A paused sandbox is not in the proxy's catalog: without auto-resume the proxy answers as
    // for one that does not exist (client-proxy `proxy.go` `catalogResolution`).
    let Some(sbx) = state.get(&id).filter(|s| !s.is_paused()) else {
        return sandbox_not_found(&id);
    };
    if port != ENVD_PORT {
        return sandbox_port(&sbx, port, method, uri, headers, body).await;
    }
    let path = uri.path().to_owned();
    // envd's auth middleware: the access token is required except on these routes, where
    // `/files` checks it itself (or a signature).
    let open = matches!(
        (&method, path.as_str()),
        (&Method::GET, "/health") | (&Method::GET, "/files") | (&Method::POST, "/files")
    );
    let token_ok = headers
        .get("x-access-token")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t == sbx.token);
    if !open && !token_ok {
        return plain_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized access, please provide a valid access token or method signing if supported",
        );
    }
    let req = EnvdRequest {
        state,
        sbx,
        method,
        uri,
        headers,
        ctl: ctl.map(|c| c.0),
        body,
    };
    match (req.method.clone(), path.as_str()) {
        (Method::GET, "/health") => StatusCode::NO_CONTENT.into_response(),
        (Method::GET, "/envs") => plain_json(StatusCode::OK, json!(req.sbx.env_vars)),
        (Method::GET, "/files") => fs::download(req).await,
        (Method::POST, "/files") => fs::upload(req).await,
        (Method::POST, p) if p.starts_with("/process.Process/") => {
            process::dispatch(req, p.trim_start_matches("/process.Process/").to_owned()).await
        }
        (Method::POST, p) if p.starts_with("/filesystem.Filesystem/") => {
            fs::dispatch(
                req,
                p.trim_start_matches("/filesystem.Filesystem/").to_owned(),
            )
            .await
        }
        _ => plain_error(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

/// The user a request acts as: `Authorization: Basic base64("<user>:")` (or the `username`
/// query parameter on `/files`), else the default user.
pub(crate) struct User {
    pub name: String,
    pub home: &'static str,
    pub uid: u32,
}

/// The uid (and gid) of the sandbox's `user`, as on E2B's templates.
pub const USER_UID: u32 = 1000;

/// The account names the sandbox's `/etc/passwd` and `/etc/group` give (owner and group in
/// `EntryInfo`).
pub(crate) fn account_name(id: u32) -> String {
    match id {
        0 => "root".into(),
        USER_UID => DEFAULT_USER.into(),
        65534 => "nogroup".into(),
        other => other.to_string(),
    }
}

/// Gives a file envd creates to the user, as envd (root) does; without namespaces the emulator
/// is not root and everything stays its own.
pub(crate) fn chown(fs: &execseam_emulator_kit::Fs, host: &std::path::Path, uid: u32) {
    if fs.is_isolated() {
        let _ = std::os::unix::fs::lchown(host, Some(uid), Some(uid));
    }
}

/// envd's `EnsureDirs`: creates the missing directories of `host` (a directory) one by one,
/// each owned by the user.
pub(crate) fn ensure_dirs(
    fs: &execseam_emulator_kit::Fs,
    host: &std::path::Path,
    uid: u32,
) -> std::io::Result<()> {
    execseam_emulator_kit::util::create_missing_dirs(
        host,
        |p| !p.exists(),
        |dir| {
            chown(fs, dir, uid);
            Ok(())
        },
    )
}

pub(crate) fn user_named(name: Option<&str>) -> Result<User, String> {
    match name.unwrap_or(DEFAULT_USER) {
        "user" => Ok(User {
            name: "user".into(),
            home: HOME,
            uid: USER_UID,
        }),
        "root" => Ok(User {
            name: "root".into(),
            home: "/root",
            uid: 0,
        }),
        other => Err(format!("invalid username: '{other}'")),
    }
}

pub(crate) fn user_of(headers: &HeaderMap) -> Result<User, String> {
    use base64::Engine as _;
    let Some(auth) = headers.get(header::AUTHORIZATION) else {
        return user_named(None);
    };
    let auth = auth.to_str().unwrap_or_default();
    let Some(b64) = auth.strip_prefix("Basic ") else {
        return Err("invalid authorization header".into());
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| "invalid authorization header".to_owned())?;
    let text = String::from_utf8_lossy(&decoded);
    let name = text.split(':').next().unwrap_or_default();
    user_named(Some(name))
}

/// envd's `ExpandAndResolve`: `""` is the home, `~` and `~/x` are expanded, relative paths are
/// joined to the home; the result is cleaned lexically.
pub(crate) fn resolve(path: &str, user: &User) -> String {
    let joined = if path.is_empty() || path == "~" {
        user.home.to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{}/{rest}", user.home)
    } else if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", user.home)
    };
    execseam_emulator_kit::util::clean_path(&joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_like_envd() {
        let u = user_named(None).unwrap();
        assert_eq!(resolve("", &u), "/home/user");
        assert_eq!(resolve("~", &u), "/home/user");
        assert_eq!(resolve("~/a/../b", &u), "/home/user/b");
        assert_eq!(resolve("rel/x", &u), "/home/user/rel/x");
        assert_eq!(resolve("/tmp//x/.", &u), "/tmp/x");
        assert!(user_named(Some("mallory")).is_err());
    }

    #[test]
    fn routing_by_headers_or_host() {
        let mut h = HeaderMap::new();
        h.insert("e2b-sandbox-id", "abc".parse().unwrap());
        h.insert("e2b-sandbox-port", "49983".parse().unwrap());
        assert_eq!(route_sandbox(&h).unwrap(), Some(("abc".into(), ENVD_PORT)));
        h.remove("e2b-sandbox-port");
        assert!(route_sandbox(&h).is_err());
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "49983-sbx9.e2b.local".parse().unwrap());
        assert_eq!(route_sandbox(&h).unwrap(), Some(("sbx9".into(), ENVD_PORT)));
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            "8080-sbx9.e2b.localhost:4000".parse().unwrap(),
        );
        assert_eq!(route_sandbox(&h).unwrap(), Some(("sbx9".into(), 8080)));
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(route_sandbox(&h).unwrap(), None);
    }
}
