//! The Machines API routes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State as AxState};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use execseam_core::{Command, Event, ExecStream, Exit};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::wire::{self, CreateMachineRequest, ExecRequest, LeaseRequest};
use super::{DEFAULT_CWD, Lease, Machine, State, TimeoutMode};
use crate::harness::{ConnControl, Fault, Sandbox, reset_connection};
use crate::util::{hex_id, rfc3339, unix};

type St = AxState<Arc<State>>;

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/v1/apps/{app}/machines", get(list).post(create))
        .route("/v1/apps/{app}/machines/{id}", get(show).delete(destroy))
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
    match &st.token {
        Some(want) => tok == want,
        None => true,
    }
}

fn unauthorized() -> Response {
    err(StatusCode::UNAUTHORIZED, "unauthorized")
}

fn machine_json(m: &Machine) -> Value {
    let lease = m.lease.lock().expect("lease").clone();
    let mut config = json!({
        "image": m.image,
        "env": m.env,
        "guest": {"cpu_kind": "shared", "cpus": 1, "memory_mb": 256},
        "metadata": *m.metadata.lock().expect("metadata"),
    });
    if m.env.is_empty() {
        config.as_object_mut().map(|c| c.remove("env"));
    }
    let mut v = json!({
        "id": m.id,
        "name": m.name,
        "state": m.state(),
        "region": m.region,
        "instance_id": m.instance_id.lock().expect("instance").clone(),
        "private_ip": "fdaa:0:1:a7b:1::2",
        "config": config,
        "image_ref": {"registry": "registry-1.docker.io", "repository": "library/debian", "tag": "stable"},
        "created_at": rfc3339(m.created),
        "updated_at": rfc3339(SystemTime::now()),
        "events": [],
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
    let all: Vec<Value> = st
        .machines
        .lock()
        .expect("machines")
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
    let req: CreateMachineRequest = if body.is_empty() {
        CreateMachineRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return err(StatusCode::BAD_REQUEST, &format!("invalid_argument: {e}")),
        }
    };
    let config = req.config.unwrap_or(Value::Null);
    let image = config["image"].as_str().map(str::to_owned);
    let env: BTreeMap<String, String> = config["env"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let metadata: BTreeMap<String, String> = config["metadata"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let launch = !req.skip_launch.unwrap_or(false);
    match st.create_machine(&app, req.name, req.region, image, env, launch) {
        Ok(m) => {
            *m.metadata.lock().expect("metadata") = metadata;
            json_response(StatusCode::OK, &machine_json(&m))
        }
        Err(e) => err(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot create: {e}"),
        ),
    }
}

async fn show(st: St, Path((app, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    match st.machine(&app, &id) {
        Some(m) => json_response(StatusCode::OK, &machine_json(&m)),
        None => not_found(),
    }
}

async fn destroy(
    st: St,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
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
    st.destroy(&app, &id);
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

async fn start(st: St, Path((app, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
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
            m.set_state(to);
        }
    });
}

async fn stop(st: St, Path((app, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
    if let Some(r) = lease_conflict(&m, &headers) {
        return r;
    }
    transition(&st, m, "stopping", "stopped", true).await;
    json_response(StatusCode::OK, &json!({"ok": true}))
}

async fn suspend(st: St, Path((app, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
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
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
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

async fn lease_show(
    st: St,
    Path((app, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
    let lease = m.lease.lock().expect("lease").clone();
    match lease.filter(|l| l.expires > SystemTime::now()) {
        Some(l) => json_response(StatusCode::OK, &lease_json(&l)),
        None => err(StatusCode::NOT_FOUND, "lease not found"),
    }
}

async fn lease_create(
    st: St,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
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

async fn lease_release(
    st: St,
    Path((app, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
    };
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
    if !authorized(&st, &headers) {
        return unauthorized();
    }
    let Some(m) = st.machine(&app, &id) else {
        return not_found();
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
