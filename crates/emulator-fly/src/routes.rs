//! The Machines API routes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, FromRequestParts, Path, Query, State as AxState};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use execseam_core::{Command, Event, ExecStream, Exit};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::wire::{self, CreateMachineRequest, ExecRequest, LeaseRequest};
use super::{DEFAULT_CWD, Lease, Machine, State, TimeoutMode};
use execseam_emulator_kit::util::{hex_id, rfc3339, unix};
use execseam_emulator_kit::{ConnControl, Fault, Sandbox, reset_connection};

type St = AxState<Arc<State>>;

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/v1/apps", get(apps_list).post(apps_create))
        .route("/v1/apps/{app}", get(apps_show).delete(apps_delete))
        .route("/v1/apps/{app}/machines", get(list).post(create))
        .route(
            "/v1/apps/{app}/machines/{id}",
            get(show).post(update).delete(destroy),
        )
        .route("/v1/apps/{app}/machines/{id}/restart", post(restart))
        .route("/v1/apps/{app}/machines/{id}/signal", post(signal))
        .route("/v1/apps/{app}/machines/{id}/ps", get(ps))
        .route("/v1/apps/{app}/machines/{id}/events", get(events))
        .route("/v1/apps/{app}/machines/{id}/metadata", get(metadata_show))
        .route(
            "/v1/apps/{app}/machines/{id}/metadata/{key}",
            post(metadata_set).delete(metadata_delete),
        )
        .route("/v1/apps/{app}/machines/{id}/exec", post(exec))
        .route("/v1/apps/{app}/machines/{id}/start", post(start))
        .route("/v1/apps/{app}/machines/{id}/stop", post(stop))
        .route("/v1/apps/{app}/machines/{id}/suspend", post(suspend))
        .route("/v1/apps/{app}/machines/{id}/wait", get(wait))
        .route(
            "/v1/apps/{app}/machines/{id}/lease",
            get(lease_show).post(lease_create).delete(lease_release),
        )
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state(state)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn err(status: StatusCode, message: &str) -> Response {
    json_response(status, &wire::error(message))
}

fn not_found() -> Response {
    err(StatusCode::NOT_FOUND, "machine not found")
}

/// fly-go's `flaps_apps_test.go` answer for an app that does not exist.
fn app_not_found() -> Response {
    err(StatusCode::NOT_FOUND, "app not found")
}

/// The machine `id` of `app`: an unknown app is `app not found`, an unknown machine `machine
/// not found` (both 404).
/// What every machine route checks first: the token (401), the app (404 `app not found`), then
/// the machine (404).
fn authorized_machine(
    st: &State,
    headers: &HeaderMap,
    app: &str,
    id: &str,
) -> Result<Arc<Machine>, Response> {
    if !authorized(st, headers) {
        return Err(unauthorized());
    }
    lookup(st, app, id)
}

/// The machine a request's path names (`/v1/apps/{app}/machines/{id}/…`), for an authorized
/// request (401 otherwise), of an app (404 "app not found") and a machine (404) that exist, in
/// that order, before any body or query is read.
struct AddressedMachine(Arc<Machine>);

impl FromRequestParts<Arc<State>> for AddressedMachine {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &Arc<State>) -> Result<Self, Response> {
        let params = Path::<BTreeMap<String, String>>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let param = |k: &str| params.get(k).map_or("", String::as_str);
        authorized_machine(st, &parts.headers, param("app"), param("id")).map(AddressedMachine)
    }
}

fn lookup(st: &State, app: &str, id: &str) -> Result<Arc<Machine>, Response> {
    if st.app(app).is_none() {
        return Err(app_not_found());
    }
    st.machine(app, id).ok_or_else(not_found)
}

fn empty(status: StatusCode) -> Response {
    status.into_response()
}

/// Accepts `Bearer X`, `FlyV1 X` and `Bearer FlyV1 X` (what `fly tokens` prints, pasted after
/// `Bearer` as the docs do).
fn authorized(st: &State, headers: &HeaderMap) -> bool {
    let Some(mut tok) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    else {
        return false;
    };
    let mut schemed = false;
    while let Some((scheme, rest)) = tok.split_once(' ') {
        if scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("flyv1") {
            tok = rest.trim();
            schemed = true;
        } else {
            break;
        }
    }
    if !schemed || tok.is_empty() {
        return false;
    }
    st.shell.token().accepts(tok)
}

fn unauthorized() -> Response {
    err(StatusCode::UNAUTHORIZED, "unauthorized")
}

fn machine_json(m: &Machine) -> Value {
    let lease = m.lease.lock().expect("lease").clone();
    let mut config = m.config.lock().expect("config").clone();
    config["image"] = json!(m.image());
    if config.get("guest").is_none() {
        config["guest"] = json!({"cpu_kind": "shared", "cpus": 1, "memory_mb": 256});
    }
    config["metadata"] = json!(*m.metadata.lock().expect("metadata"));
    let mut v = json!({
        "id": m.id,
        "name": m.name(),
        "version": m.version.lock().expect("version").clone(),
        "state": m.state(),
        "region": m.region,
        "instance_id": m.instance_id.lock().expect("instance").clone(),
        "private_ip": "fdaa:0:1:a7b:1::2",
        "config": config,
        "image_ref": {"registry": "registry-1.docker.io", "repository": "library/debian", "tag": "stable"},
        "created_at": rfc3339(m.created),
        "updated_at": rfc3339(SystemTime::now()),
        "events": *m.events.lock().expect("events"),
        "checks": [],
        "host_status": "ok",
    });
    if let Some(l) = lease.filter(|l| l.expires > SystemTime::now()) {
        v["lease_nonce_held"] = json!(!l.nonce.is_empty());
    }
    v
}

async fn list(st: St, Path(app): Path<String>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    if st.app(&app).is_none() {
        return app_not_found();
    }
    let all: Vec<Value> = st
        .shell
        .sandboxes()
        .lock()
        .iter()
        .filter(|((a, _), _)| *a == app)
        .map(|(_, m)| machine_json(m))
        .collect();
    json_response(StatusCode::OK, &Value::Array(all))
}

async fn create(st: St, Path(app): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    if st.app(&app).is_none() {
        return app_not_found();
    }
    let req: CreateMachineRequest = if body.is_empty() {
        CreateMachineRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return err(StatusCode::BAD_REQUEST, &format!("invalid_argument: {e}")),
        }
    };
    let config = req.config.unwrap_or_else(|| json!({}));
    let launch = !req.skip_launch.unwrap_or(false);
    match st.create_machine(&app, req.name, req.region, config, launch) {
        Ok(m) => json_response(StatusCode::OK, &machine_json(&m)),
        Err(e) => err(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot create: {e}"),
        ),
    }
}

async fn show(AddressedMachine(m): AddressedMachine) -> Response {
    json_response(StatusCode::OK, &machine_json(&m))
}

async fn destroy(
    st: St,
    AddressedMachine(m): AddressedMachine,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    // fly-go's `Destroy` sends the lease nonce.
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    // `force=true` (the OpenAPI spec) or `kill=true` (fly-go's `Destroy`) stops a running one.
    let force = ["force", "kill"]
        .iter()
        .any(|k| q.get(*k).is_some_and(|v| v == "true"));
    if m.state() == "started" && !force {
        return err(
            StatusCode::PRECONDITION_FAILED,
            "failed_precondition: machine still active, refusing to delete",
        );
    }
    st.destroy(&m.app, &m.id);
    json_response(StatusCode::OK, &json!({"ok": true}))
}

/// Checks the lease: a lease held by someone else (no or another nonce) refuses the request.
fn lease_conflict(m: &Machine, headers: &HeaderMap) -> Option<Response> {
    let lease = m.lease.lock().expect("lease").clone()?;
    if lease.expires <= SystemTime::now() {
        return None;
    }
    let given = headers
        .get("fly-machine-lease-nonce")
        .and_then(|v| v.to_str().ok());
    if given == Some(lease.nonce.as_str()) {
        return None;
    }
    // The shape a Fly user quoted for this 409 (`{"status":"error","message":…}`).
    Some(json_response(
        StatusCode::CONFLICT,
        &json!({
            "status": "error",
            "message": format!(
                "machine ID {} lease currently held by {}, expires at {}",
                m.id,
                lease.owner,
                rfc3339(lease.expires)
            ),
        }),
    ))
}

async fn start(st: St, AddressedMachine(m): AddressedMachine, headers: HeaderMap) -> Response {
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    let previous = m.state();
    match previous.as_str() {
        "started" | "starting" => {}
        "stopped" | "suspended" | "created" | "failed" => {
            m.set_state("starting");
            let delay = st.options().transition;
            let m2 = m.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if m2.state() == "starting"
                    && let Err(e) = m2.boot()
                {
                    tracing::warn!(error = %e, "cannot boot the emulated machine");
                    m2.set_state("failed");
                }
            });
        }
        other => {
            return err(
                StatusCode::PRECONDITION_FAILED,
                &format!("failed_precondition: machine is {other}"),
            );
        }
    }
    json_response(
        StatusCode::OK,
        &json!({"previous_state": previous, "migrated": false, "new_host": ""}),
    )
}

async fn transition(st: &State, m: Arc<Machine>, via: &str, to: &'static str, kill: bool) {
    m.set_state(via);
    let delay = st.options().transition;
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        if kill {
            m.halt(to);
        } else {
            // Suspend keeps the machine's memory and processes and nothing runs until start
            // resumes it ("save its complete state, including memory … picks up exactly where
            // it left off": fly.io/docs/reference/suspend-resume): the sandbox is frozen.
            if let Some(sb) = m.sandbox() {
                let _ = tokio::task::spawn_blocking(move || sb.pause()).await;
            }
            m.set_state(to);
            m.event("suspend", to, "user", None);
        }
    });
}

async fn stop(
    st: St,
    AddressedMachine(m): AddressedMachine,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    // [spec] StopRequest {signal, timeout}, optional; the docs: "(default: SIGINT)". The
    // signal reaches the machine's processes at once; the kill follows the transition.
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let sig = match req["signal"].as_str().filter(|s| !s.is_empty()) {
        None => libc::SIGINT,
        Some(name) => match signal_number(&json!(name)) {
            Some(n) => n,
            None => {
                return err(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid_argument: unknown signal {name}"),
                );
            }
        },
    };
    if let Some(sb) = m.sandbox() {
        sb.signal_processes(sig);
    }
    transition(&st, m, "stopping", "stopped", true).await;
    json_response(StatusCode::OK, &json!({"ok": true}))
}

async fn suspend(st: St, AddressedMachine(m): AddressedMachine, headers: HeaderMap) -> Response {
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    transition(&st, m, "suspending", "suspended", false).await;
    json_response(StatusCode::OK, &json!({"ok": true}))
}

async fn wait(
    st: St,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let get = |k: &str| q.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let states: Vec<String> = {
        let s: Vec<String> = q
            .iter()
            .filter(|(k, _)| k == "state")
            .map(|(_, v)| v.clone())
            .collect();
        if s.is_empty() {
            vec!["started".into()]
        } else {
            s
        }
    };
    let timeout = match get("timeout").map(|t| t.trim_end_matches('s').parse::<u64>()) {
        None => 60,
        Some(Ok(t)) if (1..=60).contains(&t) => t,
        Some(_) => {
            return err(
                StatusCode::BAD_REQUEST,
                "invalid_argument: timeout must be between 1s and 1m0s",
            );
        }
    };
    if states.iter().any(|s| s == "stopped") && get("instance_id").is_none() {
        return err(
            StatusCode::BAD_REQUEST,
            "invalid_argument: instance_id is required when waiting for the stopped state",
        );
    }
    let m = match lookup(&st, &app, &id) {
        Ok(m) => m,
        // A machine destroyed before the wait has reached `destroyed`.
        Err(_)
            if states.iter().any(|s| s == "destroyed")
                && st
                    .destroyed
                    .lock()
                    .expect("destroyed")
                    .contains(&(app.clone(), id.clone())) =>
        {
            return json_response(StatusCode::OK, &json!({"ok": true}));
        }
        Err(r) => return r,
    };
    let mut rx = m.subscribe();
    let reached = tokio::time::timeout(
        Duration::from_secs(timeout),
        rx.wait_for(|s| states.iter().any(|w| w == s)),
    )
    .await;
    match reached {
        Ok(Ok(_)) => json_response(StatusCode::OK, &json!({"ok": true})),
        _ => err(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "deadline_exceeded: machine did not reach {} within {timeout}s",
                states.join("|")
            ),
        ),
    }
}

fn lease_json(l: &Lease) -> Value {
    json!({
        "status": "success",
        "data": {
            "nonce": l.nonce,
            "expires_at": unix(l.expires),
            "owner": l.owner,
            "description": l.description,
            "version": l.version,
        }
    })
}

async fn lease_show(AddressedMachine(m): AddressedMachine) -> Response {
    let lease = m.lease.lock().expect("lease").clone();
    match lease.filter(|l| l.expires > SystemTime::now()) {
        Some(l) => json_response(StatusCode::OK, &lease_json(&l)),
        None => err(StatusCode::NOT_FOUND, "lease not found"),
    }
}

async fn lease_create(
    AddressedMachine(m): AddressedMachine,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req: LeaseRequest = serde_json::from_slice(&body).unwrap_or_default();
    let ttl = req
        .ttl
        .or_else(|| q.get("ttl").and_then(|t| t.parse().ok()))
        .unwrap_or(30);
    let nonce = headers
        .get("fly-machine-lease-nonce")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut slot = m.lease.lock().expect("lease");
    let now = SystemTime::now();
    match (slot.as_mut(), nonce) {
        (Some(l), Some(n)) if l.expires > now && l.nonce == n => {
            l.expires = now + Duration::from_secs(ttl);
            let body = lease_json(l);
            drop(slot);
            json_response(StatusCode::OK, &body)
        }
        (Some(l), _) if l.expires > now => {
            let msg = format!(
                "machine ID {} lease currently held by {}, expires at {}",
                m.id,
                l.owner,
                rfc3339(l.expires)
            );
            drop(slot);
            json_response(
                StatusCode::CONFLICT,
                &json!({"status": "error", "message": msg}),
            )
        }
        _ => {
            let l = Lease {
                nonce: hex_id(12),
                owner: "execseam@emulator.invalid".into(),
                description: req.description.unwrap_or_default(),
                expires: now + Duration::from_secs(ttl),
                version: hex_id(26).to_uppercase(),
            };
            let body = lease_json(&l);
            *slot = Some(l);
            drop(slot);
            json_response(StatusCode::CREATED, &body)
        }
    }
}

async fn lease_release(AddressedMachine(m): AddressedMachine, headers: HeaderMap) -> Response {
    let nonce = headers
        .get("fly-machine-lease-nonce")
        .and_then(|v| v.to_str().ok());
    let mut slot = m.lease.lock().expect("lease");
    match (slot.as_ref(), nonce) {
        (Some(l), Some(n)) if l.nonce == n => {
            *slot = None;
            drop(slot);
            json_response(
                StatusCode::OK,
                &json!({"status": "success", "data": {"ok": true}}),
            )
        }
        (None, _) => {
            drop(slot);
            err(StatusCode::NOT_FOUND, "lease not found")
        }
        _ => {
            drop(slot);
            err(
                StatusCode::CONFLICT,
                "fly-machine-lease-nonce does not match the current lease",
            )
        }
    }
}

/// How one exec ended inside the sandbox.
enum Run {
    Exited {
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        exit: Exit,
    },
    TimedOut {
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    Failed(String),
    /// The sandbox was destroyed while the command ran.
    Vanished,
}

async fn run(sandbox: &Arc<Sandbox>, cmd: Command, timeout: Duration) -> Run {
    let exec = sandbox.exec().clone();
    let task = tokio::spawn(async move {
        let mut stream = match exec.exec_stream(cmd).await {
            Ok(s) => s,
            Err(e) => return Run::Failed(e.to_string()),
        };
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                ev = stream.next() => match ev {
                    Some(Ok(Event::Stdout(b))) => stdout.extend_from_slice(&b),
                    Some(Ok(Event::Stderr(b))) => stderr.extend_from_slice(&b),
                    Some(Ok(Event::Exit(exit))) => return Run::Exited { stdout, stderr, exit },
                    Some(Err(e)) => return Run::Failed(e.to_string()),
                    None => return Run::Failed("the command's stream ended without an exit".into()),
                },
                // Dropping the stream kills the command's process group.
                () = &mut deadline => return Run::TimedOut { stdout, stderr },
            }
        }
    });
    sandbox.track(task.abort_handle());
    match task.await {
        Ok(r) => r,
        Err(_) => Run::Vanished,
    }
}

/// A 200 whose body stops halfway although its Content-Length promised more: the connection is
/// closed mid-body.
fn cut_response(body: Vec<u8>) -> Response {
    let len = body.len();
    let half = Bytes::from(body[..len / 2].to_vec());
    let parts: Vec<Result<Bytes, std::io::Error>> =
        vec![Ok(half), Err(std::io::Error::other("cut before the end"))];
    let mut r = Response::new(Body::from_stream(futures_util::stream::iter(parts)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

#[allow(clippy::too_many_lines)]
async fn exec(
    st: St,
    Path((app, id)): Path<(String, String)>,
    ctl: Option<Extension<ConnControl>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fault = st.faults.take("exec");
    if let Some(Fault::Latency(d)) = fault {
        tokio::time::sleep(d).await;
    }
    match fault {
        Some(Fault::AuthFailure) => return unauthorized(),
        Some(Fault::RateLimited { retry_after_secs }) => {
            let mut r = err(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return r;
        }
        Some(Fault::Unavailable) => {
            return err(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
        }
        Some(Fault::ResetBeforeResponse) => return reset_connection(ctl.as_deref()).await,
        _ => {}
    }
    let m = match authorized_machine(&st, &headers, &app, &id) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let req: ExecRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return err(StatusCode::BAD_REQUEST, &format!("invalid_argument: {e}")),
    };
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    let state = m.state();
    let sandbox = match (state.as_str(), m.sandbox()) {
        ("started", Some(s)) => s,
        _ => {
            return err(
                StatusCode::PRECONDITION_FAILED,
                &format!(
                    "failed_precondition: machine {} is {state}, not started",
                    m.id
                ),
            );
        }
    };
    let argv = match (req.command, req.cmd) {
        (Some(c), _) if !c.is_empty() => c,
        (_, Some(s)) => match wire::split_words(&s) {
            Some(w) if !w.is_empty() => w,
            _ => {
                return err(
                    StatusCode::BAD_REQUEST,
                    "invalid_argument: cannot parse cmd",
                );
            }
        },
        _ => {
            return err(
                StatusCode::BAD_REQUEST,
                "invalid_argument: command is required",
            );
        }
    };
    let options = st.options();
    let timeout = match req.timeout {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => options.default_timeout,
    };
    let cmd = match Command::builder(argv)
        .workdir(sandbox.visible_path(DEFAULT_CWD))
        .stdin(req.stdin.unwrap_or_default().into_bytes())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                &format!("invalid_argument: {}", e.message()),
            );
        }
    };
    if fault == Some(Fault::SandboxVanishes) {
        let (st2, app2, id2) = (st.0.clone(), app.clone(), id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            st2.destroy(&app2, &id2);
        });
    }
    let outcome = run(&sandbox, cmd, timeout).await;
    let (stdout, stderr, code, signal) = match outcome {
        // The sandbox went away under the command: destroyed (gone from the API), or stopped.
        Run::Vanished => {
            return match st.machine(&app, &id) {
                None => not_found(),
                Some(m) => err(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!(
                        "internal: machine {} is {} and its command was killed",
                        m.id(),
                        m.state()
                    ),
                ),
            };
        }
        Run::Failed(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, &format!("internal: {e}")),
        Run::TimedOut { stdout, stderr } => match options.timeout_mode {
            TimeoutMode::Error => {
                return err(
                    StatusCode::REQUEST_TIMEOUT,
                    "deadline_exceeded: Post \"http://unix/v1/exec\": net/http: request canceled (Client.Timeout exceeded while awaiting headers)",
                );
            }
            TimeoutMode::Signal => (stdout, stderr, -1, 9),
        },
        Run::Exited {
            stdout,
            stderr,
            exit,
        } => match exit {
            Exit::Code(c) => (stdout, stderr, i64::from(c), 0),
            Exit::Signal(s) => (stdout, stderr, -1, i64::from(s)),
        },
    };
    if fault == Some(Fault::ServerError) {
        // The command ran; the answer is lost.
        return err(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
    }
    let value = wire::exec_response(
        &wire::go_string(&stdout),
        &wire::go_string(&stderr),
        code,
        signal,
        options.omit_empty,
    );
    let body = value.to_string().into_bytes();
    if body.len() > options.max_response_bytes {
        return err(
            StatusCode::BAD_REQUEST,
            &format!(
                "exec output exceeds the maximum allowed response size after JSON encoding ({} byte limit)",
                options.max_response_bytes
            ),
        );
    }
    match fault {
        Some(Fault::CutBeforeExit) => cut_response(body),
        Some(Fault::MalformedBody) => {
            let half = body[..body.len() / 2].to_vec();
            let mut r = (StatusCode::OK, half).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        _ => {
            let mut r = (StatusCode::OK, body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
    }
}

// ---- Apps (docs: machines/api/apps-resource; spec: Apps_*; fly-go: flaps/flaps_apps.go) ----

/// `CreateAppRequest`: the docs and the spec name the field `app_name`; fly-go's
/// `CreateAppRequest` sends `name`. Both are read.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct CreateApp {
    app_name: Option<String>,
    name: Option<String>,
    org_slug: Option<String>,
    network: Option<String>,
}

/// Fly app names: lowercase letters, digits and dashes (the names `fly apps create` accepts).
fn valid_app_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-')
}

async fn apps_create(st: St, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let req: CreateApp = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return err(StatusCode::BAD_REQUEST, &format!("invalid_argument: {e}")),
    };
    let name = req.app_name.or(req.name).unwrap_or_default();
    if !valid_app_name(&name) {
        return err(
            StatusCode::BAD_REQUEST,
            &format!("invalid_argument: invalid app name {name:?}"),
        );
    }
    let org = req.org_slug.unwrap_or_default();
    if org.is_empty() {
        return err(
            StatusCode::BAD_REQUEST,
            "invalid_argument: org_slug is required",
        );
    }
    match st.create_app(&name, &org, &req.network.unwrap_or_default()) {
        // [docs] "Status: 201 created": {"id":"z4k69dxd8r31p5mx","created_at":1708631799000}.
        Some(a) => json_response(
            StatusCode::CREATED,
            &json!({"id": a.id, "created_at": unix(a.created) * 1000}),
        ),
        // fly-go's `flaps_error.go` knows `status: "name_taken"`.
        None => json_response(
            StatusCode::CONFLICT,
            &json!({"error": format!("app name {name:?} is already taken"), "status": "name_taken"}),
        ),
    }
}

fn app_status(st: &State, app: &str) -> (&'static str, usize) {
    let n = st
        .shell
        .sandboxes()
        .lock()
        .keys()
        .filter(|(a, _)| a == app)
        .count();
    (if n == 0 { "pending" } else { "deployed" }, n)
}

async fn apps_list(
    st: St,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    // [spec] Apps_list: `org_slug` is required.
    let Some(org) = q.get("org_slug").filter(|o| !o.is_empty()) else {
        return err(
            StatusCode::BAD_REQUEST,
            "invalid_argument: org_slug is required",
        );
    };
    let apps: Vec<super::App> = st
        .apps
        .lock()
        .expect("apps")
        .values()
        .filter(|a| &a.org_slug == org)
        .cloned()
        .collect();
    let list: Vec<Value> = apps
        .iter()
        .map(|a| {
            json!({
                "id": a.id,
                "name": a.name,
                "machine_count": app_status(&st, &a.name).1,
                "volume_count": 0,
                "network": a.network,
            })
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"total_apps": list.len(), "apps": list}),
    )
}

async fn apps_show(st: St, Path(app): Path<String>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(a) = st.app(&app) else {
        return app_not_found();
    };
    // [docs] {"id","name","status","organization":{"name","slug"}}.
    json_response(
        StatusCode::OK,
        &json!({
            "id": a.id,
            "name": a.name,
            "status": app_status(&st, &app).0,
            "organization": {"name": a.org_slug, "slug": a.org_slug},
        }),
    )
}

async fn apps_delete(
    st: St,
    Path(app): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    if st.app(&app).is_none() {
        // [docs] `_delete_app_resp`.
        return err(StatusCode::NOT_FOUND, "Could not find App");
    }
    let machines: Vec<Arc<Machine>> = st
        .shell
        .sandboxes()
        .lock()
        .iter()
        .filter(|((a, _), _)| *a == app)
        .map(|(_, m)| m.clone())
        .collect();
    // [docs] "Machines should be stopped before attempting deletion. Append ?force=true to the
    // URI to stop and delete immediately."
    let force = q.get("force").is_some_and(|v| v == "true");
    if !force && machines.iter().any(|m| m.state() == "started") {
        return err(
            StatusCode::PRECONDITION_FAILED,
            "failed_precondition: app has started machines; stop them or pass force=true",
        );
    }
    for m in machines {
        st.destroy(&app, m.id());
    }
    st.apps.lock().expect("apps").remove(&app);
    // [docs] "202 accepted", no body.
    empty(StatusCode::ACCEPTED)
}

// ---- Machine operations beside exec (spec: Machines_*; fly-go: flaps/flaps_machines.go) ----

/// A signal by name (`SIGTERM`, `TERM`) as the spec's `SignalRequest` enum has them, or by
/// number (fly-go's `Kill` sends `{"signal": 9}`).
fn signal_number(v: &Value) -> Option<i32> {
    if let Some(n) = v.as_i64() {
        return (1..=64).contains(&n).then_some(n as i32);
    }
    let name = v.as_str()?.to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    Some(match name {
        "ABRT" => libc::SIGABRT,
        "ALRM" => libc::SIGALRM,
        "FPE" => libc::SIGFPE,
        "HUP" => libc::SIGHUP,
        "ILL" => libc::SIGILL,
        "INT" => libc::SIGINT,
        "KILL" => libc::SIGKILL,
        "PIPE" => libc::SIGPIPE,
        "QUIT" => libc::SIGQUIT,
        "SEGV" => libc::SIGSEGV,
        "TERM" => libc::SIGTERM,
        "TRAP" => libc::SIGTRAP,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        _ => return None,
    })
}

fn not_started(m: &Machine) -> Response {
    err(
        StatusCode::PRECONDITION_FAILED,
        &format!(
            "failed_precondition: machine {} is {}, not started",
            m.id(),
            m.state()
        ),
    )
}

/// `POST …/{id}` (Machines_update): `UpdateMachineRequest` → 200 `Machine`. The config is
/// replaced, the version changes, and a started machine is rebooted on it (fresh root, its
/// processes restarted), as flyd replaces the VM.
async fn update(
    AddressedMachine(m): AddressedMachine,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return err(
                StatusCode::BAD_REQUEST,
                "invalid_argument: an object is required",
            );
        }
        Err(e) => return err(StatusCode::BAD_REQUEST, &format!("invalid_argument: {e}")),
    };
    let Some(config) = req.get("config").filter(|c| c.is_object()).cloned() else {
        return err(
            StatusCode::BAD_REQUEST,
            "invalid_argument: config is required",
        );
    };
    if let Some(want) = req["current_version"].as_str().filter(|v| !v.is_empty())
        && *m.version.lock().expect("version") != want
    {
        // Fly staff (community.fly.io/t/15555): 409 when `current_version` does not match.
        return err(
            StatusCode::CONFLICT,
            &format!("machine {} is not at version {want}", m.id()),
        );
    }
    let mut config = config;
    let metadata = super::string_map(&config["metadata"]);
    if let Some(c) = config.as_object_mut() {
        c.remove("metadata");
    }
    *m.config.lock().expect("config") = config;
    *m.metadata.lock().expect("metadata") = metadata;
    if let Some(name) = req["name"].as_str().filter(|n| !n.is_empty()) {
        *m.name.lock().expect("name") = name.to_owned();
    }
    *m.version.lock().expect("version") = hex_id(26).to_uppercase();
    *m.instance_id.lock().expect("instance") = hex_id(26).to_uppercase();
    m.event("update", "replacing", "user", None);
    let skip_launch = req["skip_launch"].as_bool().unwrap_or(false);
    if m.state() == "started" {
        m.halt(if skip_launch { "stopped" } else { "replacing" });
        if !skip_launch && let Err(e) = m.boot() {
            m.set_state("failed");
            return err(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("internal: cannot boot: {e}"),
            );
        }
    }
    json_response(StatusCode::OK, &machine_json(&m))
}

/// A Go duration (`10s`, `1m`, `500ms`) or a number of seconds, as the spec's restart
/// `timeout` reads.
fn go_duration(s: &str) -> Option<Duration> {
    if let Ok(n) = s.parse::<u64>() {
        return Some(Duration::from_secs(n));
    }
    // Go's `time.Duration.String()`, which fly-go's `Restart` formats with `%s`: a sequence of
    // number+unit (`1m30s`, `1h0m0s`, `500ms`).
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Some(Duration::from_secs_f64(total))
}

/// Signals the sandbox's processes with `sig`, waits up to `grace` for every one but the init
/// to end, and reports whether they did.
async fn signal_and_wait(sb: &Sandbox, sig: i32, grace: Duration) -> bool {
    sb.signal_processes(sig);
    let until = tokio::time::Instant::now() + grace;
    loop {
        if sb.process_table().iter().all(|&(pid, _)| pid == 1) {
            return true;
        }
        if tokio::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `POST …/restart?force_stop=&timeout=&signal=` (fly-go's `Restart`): the processes get the
/// signal (default SIGTERM), the rest are killed after `timeout` (default 10 s, at once with
/// `force_stop=true`), and the machine boots again on a fresh root with its main process.
async fn restart(
    AddressedMachine(m): AddressedMachine,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    let sig = match q.get("signal").filter(|s| !s.is_empty()) {
        None => libc::SIGTERM,
        Some(s) => match signal_number(&json!(s)) {
            Some(n) => n,
            None => {
                return err(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid_argument: unknown signal {s}"),
                );
            }
        },
    };
    let grace = match q.get("timeout").filter(|t| !t.is_empty()) {
        None => Duration::from_secs(10),
        Some(t) => match go_duration(t) {
            Some(d) => d,
            None => {
                return err(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid_argument: invalid timeout {t:?}"),
                );
            }
        },
    };
    let force = q.get("force_stop").is_some_and(|v| v == "true");
    let Some(sb) = m.sandbox().filter(|_| m.state() == "started") else {
        return not_started(&m);
    };
    m.set_state("restarting");
    m.event("restart", "restarting", "user", None);
    if !force && signal_and_wait(&sb, sig, grace).await {
        m.main_recorded(Duration::from_secs(2)).await;
    }
    drop(sb);
    m.halt("restarting");
    if let Err(e) = m.boot() {
        m.set_state("failed");
        return err(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("internal: cannot boot: {e}"),
        );
    }
    json_response(StatusCode::OK, &json!({"ok": true}))
}

/// `POST …/signal` (Machines_signal): `SignalRequest {signal}` reaches every process of the
/// machine (its init aside). fly-go's `Kill` sends the number 9, the spec an enum of names.
async fn signal(AddressedMachine(m): AddressedMachine, body: Bytes) -> Response {
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return err(StatusCode::BAD_REQUEST, &format!("invalid_argument: {e}")),
    };
    let Some(sig) = signal_number(&req["signal"]) else {
        return err(
            StatusCode::BAD_REQUEST,
            &format!("invalid_argument: invalid signal {}", req["signal"]),
        );
    };
    let Some(sb) = m.sandbox().filter(|_| m.state() == "started") else {
        return not_started(&m);
    };
    sb.signal_processes(sig);
    json_response(StatusCode::OK, &json!({"ok": true}))
}

/// One `ProcessStat` from /proc: `pid` as the machine sees it, `command` (argv joined),
/// `directory` (cwd), `rss` bytes, `cpu` (utime+stime in clock ticks), `stime` (start time in
/// ticks since boot), `rtime` (running time in ms), `listen_sockets` (none reported).
fn process_stat(pid: u32, host: u32) -> Option<Value> {
    let stat = std::fs::read_to_string(format!("/proc/{host}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // Fields after the command, from `state` (index 0): utime 11, stime 12, starttime 19.
    let cpu = num(11) + num(12);
    let start_ticks = num(19);
    let ticks = 100u64; // USER_HZ
    let uptime_ms = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |u| (u * 1000.0) as u64);
    let rtime = uptime_ms.saturating_sub(start_ticks * 1000 / ticks);
    let cmdline = std::fs::read(format!("/proc/{host}/cmdline")).ok()?;
    let command = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let rss = std::fs::read_to_string(format!("/proc/{host}/statm"))
        .ok()
        .and_then(|m| m.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096;
    let directory = std::fs::read_link(format!("/proc/{host}/cwd"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(json!({
        "pid": pid,
        "stime": start_ticks,
        "rtime": rtime,
        "command": command,
        "directory": directory,
        "cpu": cpu,
        "rss": rss,
        "listen_sockets": [],
    }))
}

/// `GET …/ps?sort_by=&order=` (Machines_list_processes; fly-go's `GetProcesses`): the
/// machine's processes.
async fn ps(
    AddressedMachine(m): AddressedMachine,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let Some(sb) = m.sandbox().filter(|_| m.state() == "started") else {
        return not_started(&m);
    };
    let table = sb.process_table();
    // pid 1 is shown as `init` (in degraded isolation there is no pid 1 of the sandbox's own).
    let mut list: Vec<Value> = table
        .into_iter()
        .filter_map(|(pid, host)| {
            let mut p = process_stat(pid, host)?;
            if pid == 1 {
                p["command"] = json!("init");
            }
            Some(p)
        })
        .collect();
    let key = q.get("sort_by").map_or("pid", String::as_str);
    if ![
        "pid",
        "cpu",
        "rss",
        "rtime",
        "stime",
        "command",
        "directory",
    ]
    .contains(&key)
    {
        return err(
            StatusCode::BAD_REQUEST,
            &format!("invalid_argument: cannot sort by {key}"),
        );
    }
    list.sort_by(|a, b| match (a[key].as_u64(), b[key].as_u64()) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a[key].as_str().cmp(&b[key].as_str()),
    });
    if q.get("order").is_some_and(|o| o == "desc") {
        list.reverse();
    }
    json_response(StatusCode::OK, &Value::Array(list))
}

/// `GET …/events` (Machines_list_events): `MachineEvent`s, newest first.
async fn events(AddressedMachine(m): AddressedMachine) -> Response {
    json_response(StatusCode::OK, &json!(*m.events.lock().expect("events")))
}

/// `GET …/metadata` (Machines_show_metadata): `{key: value}`.
async fn metadata_show(AddressedMachine(m): AddressedMachine) -> Response {
    json_response(
        StatusCode::OK,
        &json!(*m.metadata.lock().expect("metadata")),
    )
}

/// `POST …/metadata/{key}` with `{"value": "…"}` (fly-go's `SetMetadata`; docs
/// `_machines_metadata_update_req`): 204, no body.
async fn metadata_set(
    AddressedMachine(m): AddressedMachine,
    Path((_, _, key)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(value) = req["value"].as_str() else {
        return err(
            StatusCode::BAD_REQUEST,
            "invalid_argument: value is required",
        );
    };
    m.metadata
        .lock()
        .expect("metadata")
        .insert(key, value.to_owned());
    empty(StatusCode::NO_CONTENT)
}

/// `DELETE …/metadata/{key}` (Machines_delete_metadata): 204, no body.
async fn metadata_delete(
    AddressedMachine(m): AddressedMachine,
    Path((_, _, key)): Path<(String, String, String)>,
) -> Response {
    m.metadata.lock().expect("metadata").remove(&key);
    empty(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_timeouts_are_go_durations_or_seconds() {
        assert_eq!(go_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(go_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("1m"), Some(Duration::from_secs(60)));
        // `time.Duration.String()` forms, as fly-go's `Restart` sends them.
        assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("1h0m0s"), Some(Duration::from_secs(3600)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration(""), None);
        assert_eq!(go_duration("s"), None);
        assert_eq!(go_duration("soon"), None);
        assert_eq!(go_duration("5x"), None);
    }

    #[test]
    fn signals_by_spec_name_or_fly_go_number() {
        assert_eq!(signal_number(&json!("SIGTERM")), Some(libc::SIGTERM));
        assert_eq!(signal_number(&json!("usr1")), Some(libc::SIGUSR1));
        assert_eq!(signal_number(&json!(9)), Some(libc::SIGKILL));
        assert_eq!(signal_number(&json!(0)), None);
        assert_eq!(signal_number(&json!("SIGNOPE")), None);
        assert_eq!(signal_number(&Value::Null), None);
    }

    #[test]
    fn app_names_are_lowercase_dashes_and_digits() {
        assert!(valid_app_name("my-app-1"));
        for bad in ["", "My-App", "-a", "a-", "a_b", "a b"] {
            assert!(!valid_app_name(bad), "{bad}");
        }
    }
}
