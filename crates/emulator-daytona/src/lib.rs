#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! A Daytona emulator: the control plane (`/api/sandbox…`) and the toolbox proxy
//! (`/toolbox/{sandboxId}/…`) on one loopback port.
//!
//! What it reproduces (see `shared/research/e2b-daytona.md` part B and the daemon source):
//!
//! - the `Sandbox` DTO with every field the official SDK requires, `state: started` at once,
//!   `toolboxProxyUrl = http://127.0.0.1:<port>/toolbox` (or the `X-Forwarded-Host` a proxy in
//!   front sets, so the proxy stays in the path), create/get/delete answering 200;
//! - `POST /process/execute` and `/process/code-run`: the command written to the stdin of the
//!   daemon's shell (zsh, else bash, else sh, as `GetShell()` picks from `/etc/shells`), stdout
//!   and stderr merged into `result`, 408 on `timeout`, 200 with `exitCode -1` for a bad `cwd`;
//!   code-run's `printf | base64 -d | python3 -u - <argv joined unquoted>`;
//! - sessions: a persistent shell per session fed through its stdin; each command is written to
//!   `cmd.sh` and sourced, its output labelled line by line into `output.log` by two shell
//!   `read -r` loops (`\x01\x01\x01` stdout, `\x02\x02\x02` stderr, a `\n` forced on a last
//!   line), the exit code written after the labellers drain; sync 200 / async 202; the answers'
//!   shape chosen by `X-Daytona-SDK-Version` exactly as the daemon does; `logs?follow=true` as a
//!   WebSocket of binary frames (≤ 1024 bytes) closed with 1000 about 1 s after the exit; input to
//!   async commands; deleting a session kills its process tree;
//! - files: list/info with the daemon's `FileInfo`, bulk-download multipart (`DAYTONA-FILE-BOUNDARY`,
//!   `filename*` echo, JSON `error` parts), bulk-upload (`files[i].path` before `files[i].file`),
//!   find (literal, binary files skipped), search (base-name glob), folder, delete;
//! - PTY sessions (`pty.rs`): `/process/pty` create, list, get, delete, resize, and the
//!   `connect` and `create-connect` WebSockets, the shell on a real terminal of the sandbox;
//! - the error envelope `{statusCode, message, code, source, timestamp, path, method}`.
//! - the lifecycle: stop/start/archive, `recover` of a sandbox in `error`, auto-stop,
//!   auto-archive and auto-delete on the API's rules, network settings validated and stored
//!   (not enforced: the sandboxes share the host's network namespace).
//! - sandbox state (`state.rs`): snapshots of a sandbox (`POST /sandbox/{id}/snapshot`, the
//!   sandbox `snapshotting` meanwhile; `GET /snapshots`, `GET|DELETE /snapshots/{id}`; create
//!   with `snapshot` starts from its files, an unknown one is create's 400), preview links
//!   (`GET /sandbox/{id}/ports/{port}/preview-url` → `http://{port}-{id}.proxy.localhost:<port>`,
//!   the self-hosted shape, served by the preview proxy on this same listener with its token
//!   rules), and the 422 of `pause`/`fork` for a container sandbox (Daytona's default class).
//!
//! Faults: the request that runs a command is route `"exec"` (`POST …/session/{id}/exec`, and
//! `POST /process/execute` / `code-run`). Route `"session"` with `vanish` ends the session (its
//! shell dies) while the command runs: the pending exec answers 410 `SESSION_ENDED`.
//!
//! Sandbox paths: `/home/daytona` (HOME and the default working directory) and `/tmp` are private
//! per sandbox; the daemon's session files live under `/tmp/.daytona/sessions`.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

mod api;
mod files;
mod process;
mod pty;
mod state;

pub use state::{DAEMON_PORTS, PREVIEW_TOKEN_HEADER, PROXY_DOMAIN};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State as AxState};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::{HeaderMap, StatusCode};

use execseam_emulator_kit::{
    Emulator, FAULT_NAMES, FaultHandle, Provider, Rendered, Sandbox, SandboxSpec, Shell, User,
};

/// The default user's home, which is also the daemon's working directory.
pub const HOME: &str = "/home/daytona";
/// The default user's uid in the default image.
pub const DAYTONA_UID: u32 = 1001;
/// Where the emulated daemon keeps its session files (inside the sandbox).
pub const SESSIONS_DIR: &str = "/tmp/.daytona/sessions";
/// The default organization id in DTOs.
const ORG: &str = "execseam-emulator-org";

/// The Daytona provider emulator ([`Provider`]); its typed test accessors are reached through
/// [`DaytonaEmulator`] (`Deref`).
pub struct Daytona {
    state: Arc<State>,
}

/// A running Daytona emulator.
pub type DaytonaEmulator = Emulator<Daytona>;

impl Provider for Daytona {
    const NAME: &'static str = "daytona";
    /// Every fault on `exec`; the proxy's edge faults on `create`; `session` only vanishes.
    const FAULTS: Rendered = &[
        ("exec", FAULT_NAMES),
        ("create", &["429", "503", "auth", "latency"]),
        ("session", &["vanish"]),
    ];
    const PLACEHOLDER_TOKEN: &'static str = "dtn_execseam_emulator";
    const SCRATCH: &'static str = "/home/daytona/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "no-such-sandbox-7f3a";
    type Options = ();
    type Sandbox = SandboxEntry;
    type Key = String;

    async fn start(shell: Arc<Shell<Daytona>>, (): ()) -> std::io::Result<(Daytona, Router)> {
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
            gone: Mutex::new(HashSet::new()),
            minute: Mutex::new(std::time::Duration::from_secs(60)),
            toolbox_requests: AtomicU64::new(0),
            snapshots: Default::default(),
            signed: Default::default(),
        });
        tokio::spawn(auto_stopper(Arc::downgrade(&state)));
        Ok((
            Daytona {
                state: state.clone(),
            },
            router(state),
        ))
    }

    /// `DAYTONA_API_URL` (the control plane), `DAYTONA_API_KEY`, `DAYTONA_TARGET`.
    fn env(&self, shell: &Shell<Daytona>) -> Vec<(String, String)> {
        vec![
            (
                "DAYTONA_API_URL".into(),
                format!("{}/api", shell.base_url()),
            ),
            (
                "DAYTONA_API_KEY".into(),
                shell.token().advertised().to_owned(),
            ),
            ("DAYTONA_TARGET".into(), "us".into()),
        ]
    }
}

pub(crate) struct State {
    pub(crate) shell: Arc<Shell<Daytona>>,
    pub(crate) faults: FaultHandle,
    pub(crate) gone: Mutex<HashSet<String>>,
    /// The length of an `autoStopInterval` minute.
    pub(crate) minute: Mutex<std::time::Duration>,
    /// Requests the toolbox proxy received (a test-only count: round trips per exec).
    pub(crate) toolbox_requests: AtomicU64,
    /// The organization's snapshots (`state.rs`).
    pub(crate) snapshots: state::Snapshots,
    /// Signed preview tokens (`state.rs`).
    pub(crate) signed: state::SignedTokens,
}

/// One emulated sandbox: the registry's entry.
pub struct SandboxEntry {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) created_at: String,
    pub(crate) env: BTreeMap<String, String>,
    /// The snapshot it was created from (its name, or the default image's).
    pub(crate) snapshot: String,
    /// `authToken`: what a preview request presents in `X-Daytona-Preview-Token`.
    pub(crate) auth_token: String,
    pub(crate) sandbox: Arc<Sandbox>,
    /// What the control plane changes: state, labels, auto-stop, last activity.
    pub(crate) life: Mutex<Life>,
    pub(crate) sessions: Mutex<HashMap<String, Arc<process::Session>>>,
    /// The toolbox's PTY sessions.
    pub(crate) ptys: Mutex<HashMap<String, Arc<pty::PtySession>>>,
}

/// A sandbox's control-plane state.
pub(crate) struct Life {
    /// `started`, `stopped`, `archived` or `error` (every transition is immediate here).
    pub(crate) state: &'static str,
    pub(crate) labels: BTreeMap<String, String>,
    /// `autoStopInterval` in minutes; 0 disables it.
    pub(crate) auto_stop: u64,
    /// `autoArchiveInterval` in minutes of being stopped (never 0: the API stores 0 as its
    /// maximum).
    pub(crate) auto_archive: u64,
    /// `autoDeleteInterval` in minutes of being stopped; negative disables it, 0 deletes the
    /// sandbox when it stops.
    pub(crate) auto_delete: i64,
    pub(crate) network_block_all: bool,
    pub(crate) network_allow_list: Option<String>,
    pub(crate) domain_allow_list: Option<String>,
    /// `errorReason` and `recoverable` of a sandbox in `error`.
    pub(crate) error_reason: Option<String>,
    pub(crate) recoverable: bool,
    pub(crate) last_activity: std::time::Instant,
    pub(crate) updated_at: String,
}

/// `maxAutoArchiveInterval` (`apps/api/src/config/configuration.ts`:
/// `MAX_AUTO_ARCHIVE_INTERVAL`, default 43200 minutes, 30 days).
pub(crate) const MAX_AUTO_ARCHIVE: u64 = 43200;

impl Life {
    /// A started sandbox; `autoStopInterval` defaults to 15 minutes, `autoArchiveInterval` to 7
    /// days and auto-delete is off (the API's defaults).
    pub(crate) fn new(labels: BTreeMap<String, String>, now: String, auto_stop: u64) -> Life {
        Life {
            state: "started",
            labels,
            auto_stop,
            auto_archive: 10080,
            auto_delete: -1,
            network_block_all: false,
            network_allow_list: None,
            domain_allow_list: None,
            error_reason: None,
            recoverable: false,
            last_activity: std::time::Instant::now(),
            updated_at: now,
        }
    }

    pub(crate) fn touch(&mut self) {
        self.last_activity = std::time::Instant::now();
        self.updated_at = files::rfc3339(std::time::SystemTime::now());
    }
}

/// Destroying a sandbox kills its sessions and removes its root; stopping the emulator
/// destroys them all (a session's shell, and whatever its commands left running in the
/// background, holds its sandbox, so nothing else would).
impl execseam_emulator_kit::SandboxEntry for SandboxEntry {
    fn teardown(&self) {
        for s in self.sessions.lock().expect("sessions").drain() {
            s.1.kill();
        }
        self.sandbox.destroy();
    }
}

impl SandboxEntry {
    /// Stops the sandbox: its sessions and processes die, its files stay. True when its
    /// `autoDeleteInterval` is 0: the API then destroys it instead (`sandbox.service.ts` `stop`,
    /// `desiredState: DESTROYED`), which the caller does.
    pub(crate) fn stop(&self) -> bool {
        self.halt();
        let mut life = self.life.lock().expect("life");
        life.state = "stopped";
        life.touch();
        life.auto_delete == 0
    }

    /// Kills the sandbox's sessions and processes.
    pub(crate) fn halt(&self) {
        for s in self.sessions.lock().expect("sessions").drain() {
            s.1.kill();
        }
        for p in self.ptys.lock().expect("ptys").drain() {
            p.1.kill();
        }
        self.sandbox.kill_processes();
    }
}

/// The API's lifecycle crons (`apps/api/src/sandbox/managers/sandbox.manager.ts`):
/// `auto-stop-check` stops started sandboxes idle for longer than their `autoStopInterval`
/// (activity is any toolbox request, the proxy's `updateLastActivity`), `auto-archive-check`
/// archives stopped ones whose last activity is older than their `autoArchiveInterval`, and
/// `auto-delete-check` destroys stopped ones past a non-negative `autoDeleteInterval`.
async fn auto_stopper(state: std::sync::Weak<State>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let Some(st) = state.upgrade() else { return };
        let minute = *st.minute.lock().expect("minute");
        let due = |l: &Life, minutes: u64| l.last_activity.elapsed() >= minute * minutes as u32;
        let all: Vec<Arc<SandboxEntry>> = st.shell.sandboxes().lock().values().cloned().collect();
        for s in all {
            let mut l = s.life.lock().expect("life");
            match l.state {
                "started" if l.auto_stop > 0 && due(&l, l.auto_stop) => {
                    drop(l);
                    tracing::debug!(sandbox = %s.id, "auto-stop");
                    if s.stop() {
                        st.destroy(&s.id);
                    }
                }
                "stopped" if l.auto_delete >= 0 && due(&l, l.auto_delete as u64) => {
                    drop(l);
                    tracing::debug!(sandbox = %s.id, "auto-delete");
                    st.destroy(&s.id);
                }
                "stopped" if due(&l, l.auto_archive) => {
                    tracing::debug!(sandbox = %s.id, "auto-archive");
                    l.state = "archived";
                    l.updated_at = files::rfc3339(std::time::SystemTime::now());
                }
                _ => {}
            }
        }
    }
}

impl Daytona {
    /// How long one minute of `autoStopInterval` lasts (a minute unless a test shortens it).
    pub fn set_minute(&self, minute: std::time::Duration) {
        *self.state.minute.lock().expect("minute") = minute;
    }

    /// Puts a sandbox in the `error` state, as the runner reports a failed sandbox (its
    /// processes die; `errorReason` and `recoverable` as given), so `recover` can be exercised:
    /// nothing on Daytona's wire puts a sandbox there on request.
    pub fn fail_sandbox(&self, id: &str, reason: &str, recoverable: bool) -> bool {
        let Some(s) = self.state.sandbox(id) else {
            return false;
        };
        s.halt();
        let mut life = s.life.lock().expect("life");
        life.state = "error";
        life.error_reason = Some(reason.to_owned());
        life.recoverable = recoverable;
        life.touch();
        true
    }

    /// A sandbox's labels.
    pub fn sandbox_labels(&self, id: &str) -> Option<BTreeMap<String, String>> {
        self.state
            .sandbox(id)
            .map(|s| s.life.lock().expect("life").labels.clone())
    }

    /// A sandbox's state as the control plane reports it (`started`, `stopped`, `archived`,
    /// `snapshotting`).
    pub fn sandbox_state(&self, id: &str) -> Option<&'static str> {
        self.state
            .sandbox(id)
            .map(|s| s.life.lock().expect("life").state)
    }

    /// The control plane: `DAYTONA_API_URL`.
    pub fn api_url(&self) -> String {
        format!("{}/api", self.state.shell.base_url())
    }

    /// The toolbox base every sandbox's DTO names.
    pub fn toolbox_proxy_url(&self) -> String {
        format!("{}/toolbox", self.state.shell.base_url())
    }

    /// Arms "the session ends while the next command runs".
    pub fn end_next_session_mid_command(&self) {
        self.state
            .faults
            .arm("session", execseam_emulator_kit::Fault::SandboxVanishes);
    }

    /// How the sandbox `id`'s commands see `path` (differs only without mount namespaces).
    pub fn visible_path(&self, id: &str, path: &str) -> Option<String> {
        let sb = self.state.shell.sandboxes().lock().get(id)?.clone();
        Some(sb.sandbox.visible_path(path))
    }

    /// A sandbox's harness handle (to inspect it from a test).
    pub fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        let e = self.state.shell.sandboxes().lock().get(id).cloned()?;
        Some(e.sandbox.clone())
    }

    /// Where the sandbox `id`'s `path` is on this host.
    pub fn host_path(&self, id: &str, path: &str) -> Option<std::path::PathBuf> {
        let sb = self.state.shell.sandboxes().lock().get(id)?.clone();
        Some(sb.sandbox.host_path(path))
    }

    /// The names of the organization's snapshots, oldest first.
    pub fn snapshot_names(&self) -> Vec<String> {
        self.state
            .snapshots
            .lock()
            .expect("snapshots")
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// The ids of the live sandboxes.
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.state.shell.sandboxes().keys()
    }

    /// How many requests the toolbox proxy (`/toolbox/…`, every sandbox) has received: a
    /// test-only count of an adapter's round trips per exec. WebSocket upgrades count once.
    pub fn toolbox_requests(&self) -> u64 {
        self.state.toolbox_requests.load(Ordering::Relaxed)
    }

    /// How many sessions the sandbox `id` has open.
    pub fn session_count(&self, id: &str) -> usize {
        self.state
            .shell
            .sandboxes()
            .lock()
            .get(id)
            .map_or(0, |s| s.sessions.lock().expect("sessions").len())
    }

    /// Destroys a sandbox as if the provider had (its processes die; requests get 404).
    pub fn destroy_sandbox(&self, id: &str) {
        self.state.destroy(id);
    }
}

impl State {
    pub(crate) fn sandbox(&self, id: &str) -> Option<Arc<SandboxEntry>> {
        let map = self.shell.sandboxes().lock();
        if let Some(s) = map.get(id) {
            return Some(s.clone());
        }
        map.values().find(|s| s.name == id).cloned()
    }

    pub(crate) fn destroy(&self, id: &str) {
        let entry = self.shell.sandboxes().remove(id);
        if let Some(e) = entry {
            self.gone.lock().expect("gone").insert(e.id.clone());
            execseam_emulator_kit::SandboxEntry::teardown(&*e);
        }
    }

    pub(crate) fn spec(&self) -> SandboxSpec {
        let env: BTreeMap<String, String> = [
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            ("LANG", "C.UTF-8"),
            ("HOSTNAME", "daytona"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        // The default image (daytonaio/sandbox, `images/sandbox/Dockerfile`) starts from
        // mcr.microsoft.com/devcontainers/python, whose `vscode` user is uid 1000, then runs
        // `useradd -m daytona` (so uid 1001) with passwordless sudo, and `USER daytona`.
        SandboxSpec::new(
            "daytona",
            "daytona",
            User::new("daytona", DAYTONA_UID, HOME).groups(["sudo"]),
            env,
        )
        .other_users([User::root()])
    }
}

fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/api/sandbox", post(api::create).get(api::list))
        .route("/api/sandbox/paginated", get(api::list))
        .route("/api/sandbox/{id}", get(api::get_one).delete(api::delete))
        .route("/api/sandbox/{id}/toolbox-proxy-url", get(api::proxy_url))
        .route("/api/sandbox/{id}/start", post(api::start))
        .route("/api/sandbox/{id}/stop", post(api::stop))
        .route("/api/sandbox/{id}/archive", post(api::archive))
        .route(
            "/api/sandbox/{id}/labels",
            axum::routing::put(api::replace_labels),
        )
        .route(
            "/api/sandbox/{id}/autostop/{interval}",
            post(api::set_autostop),
        )
        .route(
            "/api/sandbox/{id}/autoarchive/{interval}",
            post(api::set_autoarchive),
        )
        .route(
            "/api/sandbox/{id}/autodelete/{interval}",
            post(api::set_autodelete),
        )
        .route(
            "/api/sandbox/{id}/network-settings",
            post(api::network_settings),
        )
        .route("/api/sandbox/{id}/recover", post(api::recover))
        .route("/api/sandbox/{id}/snapshot", post(state::snapshot))
        .route("/api/sandbox/{id}/pause", post(state::pause))
        .route("/api/sandbox/{id}/fork", post(state::fork))
        .route(
            "/api/sandbox/{id}/ports/{port}/preview-url",
            get(state::preview_url),
        )
        .route(
            "/api/sandbox/{id}/ports/{port}/signed-preview-url",
            get(state::signed_preview_url),
        )
        .route(
            "/api/sandbox/{id}/ports/{port}/signed-preview-url/{token}/expire",
            post(state::expire_signed_preview_url),
        )
        .route("/api/snapshots", get(state::list_snapshots))
        .route(
            "/api/snapshots/{id}",
            get(state::get_snapshot).delete(state::delete_snapshot),
        )
        .route("/toolbox/{id}/{*rest}", any(toolbox))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            state::preview_proxy,
        ))
        .with_state(state)
}

async fn not_found(req: Request) -> Response {
    let path = req.uri().path().to_owned();
    envelope(
        StatusCode::NOT_FOUND,
        &format!("Cannot {} {path}", req.method()),
        None,
        "DAYTONA_API",
        &path,
        req.method().as_str(),
    )
}

/// Checks `Authorization: Bearer <token>`.
pub(crate) fn authorized(state: &State, headers: &HeaderMap) -> bool {
    let Some(v) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(token) = v.strip_prefix("Bearer ") else {
        return false;
    };
    state.shell.token().accepts(token)
}

pub(crate) fn unauthorized(source: &str, path: &str, method: &str) -> Response {
    envelope(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        Some("UNAUTHORIZED"),
        source,
        path,
        method,
    )
}

/// The error envelope every Daytona component sends.
pub(crate) fn envelope(
    status: StatusCode,
    message: &str,
    code: Option<&str>,
    source: &str,
    path: &str,
    method: &str,
) -> Response {
    let mut body = serde_json::json!({
        "statusCode": status.as_u16(),
        "message": message,
        "timestamp": files::rfc3339(std::time::SystemTime::now()),
        "path": path,
        "method": method,
        "source": source,
    });
    if let Some(code) = code {
        body["code"] = code.into();
    }
    json_response(status, &body)
}

pub(crate) fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(
            http::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        )],
        body.to_string(),
    )
        .into_response()
}

/// A request the proxy forwards to the sandbox's runner: a stopped sandbox's container has no
/// address (400 "… Is the Sandbox started?"); a request is activity otherwise.
pub(crate) fn reach_runner(sb: &SandboxEntry, path: &str, method: &str) -> Result<(), Response> {
    let mut life = sb.life.lock().expect("life");
    // A snapshotting container runs on (the runner commits it without pausing).
    if !matches!(life.state, "started" | "snapshotting") {
        drop(life);
        return Err(envelope(
            StatusCode::BAD_REQUEST,
            "bad request: no IP address found. Is the Sandbox started?",
            Some("BAD_REQUEST"),
            "DAYTONA_RUNNER",
            path,
            method,
        ));
    }
    life.last_activity = std::time::Instant::now();
    Ok(())
}

/// The toolbox proxy: `/toolbox/{sandboxId}/{path}`.
async fn toolbox(
    AxState(state): AxState<Arc<State>>,
    Path((id, rest)): Path<(String, String)>,
    req: Request<Body>,
) -> Response {
    state.toolbox_requests.fetch_add(1, Ordering::Relaxed);
    let path = format!("/{rest}");
    let method = req.method().as_str().to_owned();
    if !authorized(&state, req.headers()) {
        return unauthorized("DAYTONA_PROXY", req.uri().path(), &method);
    }
    let Some(sb) = state.sandbox(&id) else {
        return envelope(
            StatusCode::NOT_FOUND,
            &format!("Sandbox with ID or name {id} not found"),
            Some("SANDBOX_NOT_FOUND"),
            "DAYTONA_PROXY",
            req.uri().path(),
            &method,
        );
    };
    // The proxy forwards to the runner, which finds no address for a stopped sandbox's
    // container and answers 400 "… Is the Sandbox started?" (runner
    // `pkg/api/controllers/proxy.go` `getProxyTarget`); a request is activity otherwise.
    if let Err(r) = reach_runner(&sb, req.uri().path(), &method) {
        return r;
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segs.len() >= 2 && segs[..2] == ["process", "pty"] {
        let segs2 = segs.clone();
        if let Some(r) = pty::route(sb.clone(), &method, &segs2, &path, req).await {
            return r;
        }
        return daemon_error(
            StatusCode::NOT_FOUND,
            "not found",
            Some("NOT_FOUND"),
            &path,
            &method,
        );
    }
    match (method.as_str(), segs.as_slice()) {
        ("GET", ["version"]) => {
            json_response(StatusCode::OK, &serde_json::json!({"version": "0.226.1"}))
        }
        ("GET", ["user-home-dir"]) => {
            json_response(StatusCode::OK, &serde_json::json!({"dir": HOME}))
        }
        ("GET", ["work-dir"]) => json_response(StatusCode::OK, &serde_json::json!({"dir": HOME})),
        ("POST", ["process", "execute"]) => process::execute(state, sb, req, false).await,
        ("POST", ["process", "code-run"]) => process::execute(state, sb, req, true).await,
        ("GET", ["process", "session"]) => process::list_sessions(sb).await,
        ("POST", ["process", "session"]) => process::create_session(sb, req).await,
        ("GET", ["process", "session", sid]) => process::get_session(sb, sid, &path).await,
        ("DELETE", ["process", "session", sid]) => process::delete_session(sb, sid, &path).await,
        ("POST", ["process", "session", sid, "exec"]) => {
            let sid = (*sid).to_owned();
            process::session_exec(state, sb, &sid, req).await
        }
        ("GET", ["process", "session", sid, "command", cid]) => {
            process::get_command(sb, sid, cid, &path).await
        }
        ("GET", ["process", "session", sid, "command", cid, "logs"]) => {
            let (sid, cid) = ((*sid).to_owned(), (*cid).to_owned());
            process::logs(sb, &sid, &cid, req).await
        }
        ("POST", ["process", "session", sid, "command", cid, "input"]) => {
            let (sid, cid) = ((*sid).to_owned(), (*cid).to_owned());
            process::input(sb, &sid, &cid, req).await
        }
        ("GET", ["files"] | ["files", ""]) => files::list(sb, req).await,
        ("GET", ["files", "info"]) => files::info(sb, req).await,
        ("GET", ["files", "find"]) => files::find(sb, req).await,
        ("GET", ["files", "search"]) => files::search(sb, req).await,
        ("GET", ["files", "download"]) => files::download_one(sb, req).await,
        ("POST", ["files", "bulk-download"]) => files::bulk_download(sb, req).await,
        ("POST", ["files", "bulk-upload"]) => files::bulk_upload(sb, req).await,
        ("POST", ["files", "folder"]) => files::folder(sb, req).await,
        ("DELETE", ["files"] | ["files", ""]) => files::delete(sb, req).await,
        ("POST", ["files", "move"]) => files::move_file(sb, req).await,
        ("POST", ["files", "replace"]) => files::replace(sb, req).await,
        ("POST", ["files", "permissions"]) => files::permissions(sb, req).await,
        _ => daemon_error(
            StatusCode::NOT_FOUND,
            "not found",
            Some("NOT_FOUND"),
            &path,
            &method,
        ),
    }
}

/// An error from the daemon (`source: DAYTONA_DAEMON`).
pub(crate) fn daemon_error(
    status: StatusCode,
    message: &str,
    code: Option<&str>,
    path: &str,
    method: &str,
) -> Response {
    envelope(status, message, code, "DAYTONA_DAEMON", path, method)
}

/// A random UUIDv4.
pub(crate) fn uuid_v4() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut words = [0u64; 2];
    for w in &mut words {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(N.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        *w = h.finish();
    }
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&words[0].to_le_bytes());
    b[8..].copy_from_slice(&words[1].to_le_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
