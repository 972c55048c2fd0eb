//! The router: authentication, errors, sandbox and session lifecycle.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::state::{Spec, State, now_ms};
use super::{cmd, fs, snapshot};
use execseam_emulator_kit::{ConnControl, Fault, reset_connection};

pub(crate) type St = AxState<Arc<State>>;

/// The largest request body (a file upload); the Python SDK keeps JSON bodies under 1 MB.
const MAX_BODY: usize = 256 * 1024 * 1024;

pub(crate) fn router(state: Arc<State>) -> Router {
    let api = Router::new()
        .route("/v3/sandboxes", post(create))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/v2/sandboxes/sessions", get(list_sessions))
        .route("/v2/sandboxes/sessions/{sid}", get(get_session))
        .route("/v2/sandboxes/sessions/{sid}/stop", post(stop_session))
        .route(
            "/v2/sandboxes/sessions/{sid}/extend-timeout",
            post(extend_timeout),
        )
        .route(
            "/v2/sandboxes/sessions/{sid}/cmd",
            post(cmd::run).get(cmd::list),
        )
        .route("/v2/sandboxes/sessions/{sid}/cmd/{cid}", get(cmd::get))
        .route(
            "/v2/sandboxes/sessions/{sid}/cmd/{cid}/logs",
            get(cmd::logs),
        )
        .route(
            "/v2/sandboxes/sessions/{sid}/cmd/{cid}/kill",
            post(cmd::kill),
        )
        .route(
            "/v2/sandboxes/sessions/{sid}/cmd/{cid}/stdin",
            post(cmd::stdin),
        )
        .route("/v2/sandboxes/sessions/{sid}/fs/{op}", post(fs::op))
        .route(
            "/v2/sandboxes/sessions/{sid}/snapshot",
            post(snapshot::create),
        )
        .route("/v2/sandboxes/snapshots", get(snapshot::list))
        .route(
            "/v2/sandboxes/snapshots/{id}",
            get(snapshot::get).delete(snapshot::delete),
        )
        .route(
            "/v2/sandboxes/{name}",
            get(get_sandbox).delete(delete_sandbox),
        )
        .fallback(no_route)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state.clone());
    // The SDKs' default base is `https://vercel.com/api`: serve both.
    Router::new()
        .nest("/api", api.clone())
        .merge(api)
        .layer(middleware::from_fn_with_state(state, route_proxy))
}

/// A sandbox route: a request whose `Host` is `{subdomain}.vercel.localhost` goes to that
/// port of the sandbox (public, as a `vercel.run` route is: no token); anything else is the
/// API's. A port nothing of the sandbox listens on, or a stopped session, is a 502 (inferred:
/// the service's own error page is not documented).
pub(crate) async fn route_proxy(st: St, req: Request, next: Next) -> Response {
    let sub = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.rsplit_once(':').map_or(h, |(host, _)| host))
        .and_then(|h| h.strip_suffix(super::state::ROUTE_DOMAIN))
        .and_then(|h| h.strip_suffix('.'))
        .map(str::to_owned);
    let Some(sub) = sub else {
        return next.run(req).await;
    };
    let names = st.names();
    let Some((sb, port)) = names
        .iter()
        .filter_map(|n| st.sandbox(n))
        .find_map(|sb| sb.route_port(&sub).map(|p| (sb, p)))
    else {
        return api_error(StatusCode::NOT_FOUND, "not_found", "no such sandbox route");
    };
    if !sb.session().is_running() {
        return api_error(
            StatusCode::BAD_GATEWAY,
            "sandbox_stopped",
            "the sandbox is stopped",
        );
    }
    match execseam_emulator_kit::ports::forward(&sb.root(), port, req).await {
        Ok(r) => r.map(Body::new),
        Err(e) => api_error(StatusCode::BAD_GATEWAY, "bad_gateway", &e.to_string()),
    }
}

/// `{"error":{"code","message"}}` with the status (`base-client.ts` `ErrorResponseBody`).
pub(crate) fn api_error(status: StatusCode, code: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({"error": {"code": code, "message": message}}),
    )
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

pub(crate) fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, &body)
}

pub(crate) fn forbidden() -> Response {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({"error": {"code": "forbidden", "message": "Not authorized", "invalidToken": true}}),
    )
}

pub(crate) fn not_found(what: &str, id: &str) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("{what} not found: {id}"),
    )
}

pub(crate) fn stopped() -> Response {
    api_error(StatusCode::GONE, "sandbox_stopped", "Sandbox is stopped")
}

pub(crate) fn bad_request(message: &str) -> Response {
    api_error(StatusCode::BAD_REQUEST, "bad_request", message)
}

async fn no_route(method: Method, uri: Uri) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("No route for {method} {}", uri.path()),
    )
}

async fn authenticate(st: St, req: Request, next: Next) -> Response {
    let token = execseam_emulator_kit::bearer(req.headers()).unwrap_or("");
    if !st.shell.token().accepts(token) {
        return forbidden();
    }
    next.run(req).await
}

/// The query string's pairs, percent-decoded (`tags` may repeat).
pub(crate) fn query(uri: &Uri) -> Vec<(String, String)> {
    execseam_emulator_kit::util::form_pairs(uri.query().unwrap_or(""))
}

pub(crate) fn query_get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Parses a JSON object body; an empty body is `{}` (the TS SDK sends none on `stop`).
pub(crate) fn json_body(body: &Bytes) -> Result<serde_json::Map<String, Value>, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(bad_request("Invalid JSON body")),
    }
}

/// The status faults both `exec` and `create` take, before anything happens. `None`: proceed.
pub(crate) async fn status_fault(
    fault: Option<Fault>,
    ctl: Option<&ConnControl>,
) -> Option<Response> {
    match fault? {
        Fault::AuthFailure => Some(forbidden()),
        Fault::RateLimited { retry_after_secs } => {
            let mut r = api_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "Too many requests, please try again later",
            );
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&retry_after_secs.to_string()).expect("digits"),
            );
            Some(r)
        }
        Fault::Unavailable => Some(api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "The service is temporarily unavailable",
        )),
        Fault::ResetBeforeResponse => Some(reset_connection(ctl).await),
        Fault::Latency(d) => {
            tokio::time::sleep(d).await;
            None
        }
        _ => None,
    }
}

fn string_map(v: Option<&Value>) -> Result<BTreeMap<String, String>, Response> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(bad_request(&format!("{k}: expected a string"))),
            })
            .collect(),
        Some(_) => Err(bad_request("expected an object of strings")),
    }
}

async fn create(st: St, headers: HeaderMap, req: Request) -> Response {
    let ctl = req.extensions().get::<ConnControl>().cloned();
    let fault = st.faults.take("create");
    if let Some(r) = status_fault(fault, ctl.as_ref()).await {
        return r;
    }
    let _ = headers;
    let Ok(body) = axum::body::to_bytes(req.into_body(), MAX_BODY).await else {
        return bad_request("Invalid body");
    };
    let body = match json_body(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(project_id) = body.get("projectId").and_then(Value::as_str) else {
        return bad_request("projectId is required");
    };
    let from = match snapshot::source(&st, &body) {
        Ok(f) => f,
        Err(r) => return r,
    };
    if body.get("keepLastSnapshots").is_some_and(|v| !v.is_null()) {
        return bad_request("keepLastSnapshots (snapshot retention) is not emulated");
    }
    let snapshot_expiration = match body.get("snapshotExpiration") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) => Some(ms),
            None => return bad_request("snapshotExpiration must be a non-negative number of ms"),
        },
    };
    let name = match body.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        None | Some(Value::Null) => format!("sandbox-{}", execseam_emulator_kit::clock::hex_id(32)),
        Some(_) => return bad_request("name must be a non-empty string"),
    };
    let ports = match body.get("ports") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => match a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>() {
            Some(p) => p,
            None => return bad_request("ports must be numbers"),
        },
        Some(_) => return bad_request("ports must be an array"),
    };
    let timeout = match body.get("timeout") {
        None | Some(Value::Null) => st.options.default_timeout.as_millis() as u64,
        Some(v) => match v.as_f64() {
            Some(ms) if ms > 0.0 => ms as u64,
            _ => return bad_request("timeout must be a positive number of milliseconds"),
        },
    };
    let vcpus = body
        .get("resources")
        .and_then(|r| r.get("vcpus"))
        .and_then(Value::as_u64)
        .unwrap_or(2);
    let env = match string_map(body.get("env")) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let tags = match string_map(body.get("tags")) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let spec = Spec {
        project_id: project_id.to_owned(),
        // Persistence is the default ("Every sandbox created with `Sandbox.create()` … is
        // persistent unless you explicitly opt out": vercel.com/docs/sandbox/concepts/
        // persistent-sandboxes); neither SDK sends `persistent` unless set.
        persistent: body
            .get("persistent")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        vcpus,
        memory: vcpus * 2048,
        runtime: body
            .get("runtime")
            .and_then(Value::as_str)
            .map(str::to_owned),
        ports,
        tags,
        env,
        snapshot_expiration,
    };
    match st.create(name.clone(), spec, timeout, from.as_deref()) {
        Ok(Some(sb)) => ok(json!({
            "sandbox": sb.payload(),
            "session": sb.session().payload(),
            "routes": sb.routes(st.shell.base_url()),
            "resumed": false,
        })),
        Ok(None) => api_error(
            StatusCode::CONFLICT,
            "conflict",
            &format!("A sandbox named {name:?} already exists"),
        ),
        Err(e) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_server_error",
            &format!("could not create the sandbox: {e}"),
        ),
    }
}

async fn get_sandbox(st: St, Path(name): Path<String>, uri: Uri) -> Response {
    let Some(sb) = st.sandbox(&name) else {
        return not_found("Sandbox", &name);
    };
    let q = query(&uri);
    let resumed = query_get(&q, "resume") == Some("true") && st.resume(&sb);
    ok(json!({
        "sandbox": sb.payload(),
        "session": sb.session().payload(),
        "routes": sb.routes(st.shell.base_url()),
        "resumed": resumed,
    }))
}

async fn delete_sandbox(st: St, Path(name): Path<String>, _body: Bytes) -> Response {
    match st.delete(&name) {
        Some(sb) => {
            ok(json!({ "sandbox": sb.payload(), "routes": sb.routes(st.shell.base_url()) }))
        }
        None => not_found("Sandbox", &name),
    }
}

async fn list(st: St, uri: Uri) -> Response {
    let q = query(&uri);
    let project = query_get(&q, "project");
    let prefix = query_get(&q, "namePrefix").unwrap_or("");
    let tags: Vec<(&str, &str)> = q
        .iter()
        .filter(|(k, _)| k == "tags")
        .filter_map(|(_, v)| v.split_once(':'))
        .collect();
    let mut all: Vec<_> = st
        .shell
        .sandboxes()
        .lock()
        .values()
        .filter(|sb| project.is_none_or(|p| sb.spec.project_id == p))
        .filter(|sb| sb.name.starts_with(prefix))
        .filter(|sb| {
            tags.iter()
                .all(|(k, v)| sb.spec.tags.get(*k).map(String::as_str) == Some(*v))
        })
        .cloned()
        .collect();
    let by_name = query_get(&q, "sortBy") == Some("name");
    all.sort_by(|a, b| {
        if by_name {
            a.name.cmp(&b.name)
        } else {
            (a.created_at, &a.name).cmp(&(b.created_at, &b.name))
        }
    });
    if query_get(&q, "sortOrder") != Some("asc") {
        all.reverse();
    }
    ok(paged("sandboxes", &q, &all, |sb| sb.payload()))
}

/// One page of a sorted listing as the API answers it: `{<key>: [...], pagination: {count,
/// next}}` (the SDK's `CursorPagination`: `count` of this page, `next` the cursor of the next
/// page or null), `limit` per page (default 50), `cursor` an offset here (opaque to clients).
pub(crate) fn paged<T>(
    key: &str,
    q: &[(String, String)],
    all: &[T],
    payload: impl Fn(&T) -> Value,
) -> Value {
    let start: usize = query_get(q, "cursor")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let limit: usize = query_get(q, "limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(50);
    let page: Vec<Value> = all.iter().skip(start).take(limit).map(payload).collect();
    let next = (start + limit < all.len()).then(|| (start + limit).to_string());
    json!({ key: page, "pagination": { "count": page.len(), "next": next } })
}

async fn list_sessions(st: St, uri: Uri) -> Response {
    let q = query(&uri);
    let project = query_get(&q, "project");
    let name = query_get(&q, "name");
    let mut sessions: Vec<_> = st
        .sessions
        .lock()
        .expect("sessions")
        .values()
        .filter(|s| project.is_none_or(|p| s.project_id == p))
        .filter(|s| name.is_none_or(|n| s.sandbox_name == n))
        .cloned()
        .collect();
    sessions.sort_by_key(|s| std::cmp::Reverse(s.requested_at));
    let page: Vec<Value> = sessions.iter().map(|s| s.payload()).collect();
    ok(json!({ "sessions": page, "pagination": { "count": page.len(), "next": null } }))
}

async fn get_session(st: St, Path(sid): Path<String>) -> Response {
    let Some(s) = st.session(&sid) else {
        return not_found("Session", &sid);
    };
    let routes = st
        .sandbox(&s.sandbox_name)
        .map(|sb| sb.routes(st.shell.base_url()))
        .unwrap_or(json!([]));
    ok(json!({ "session": s.payload(), "routes": routes }))
}

// The body (`{}` from the Python SDK) is taken even though nothing in it is used: a request
// body left unread makes hyper close the keep-alive connection under the client's next request.
async fn stop_session(st: St, Path(sid): Path<String>, _body: Bytes) -> Response {
    let Some(s) = st.session(&sid) else {
        return not_found("Session", &sid);
    };
    s.stop();
    let mut body = json!({ "session": s.payload() });
    if let Some(sb) = st.sandbox(&s.sandbox_name) {
        if let Ok(mut inner) = sb.inner.lock() {
            inner.status_updated_at = now_ms();
        }
        body["sandbox"] = sb.payload();
    }
    ok(body)
}

async fn extend_timeout(st: St, Path(sid): Path<String>, body: Bytes) -> Response {
    let Some(s) = st.session(&sid) else {
        return not_found("Session", &sid);
    };
    if !s.is_running() {
        return stopped();
    }
    let body = match json_body(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(d) = body
        .get("duration")
        .and_then(Value::as_f64)
        .filter(|d| *d > 0.0)
    else {
        return bad_request("duration must be a positive number of milliseconds");
    };
    {
        let mut inner = s.inner.lock().expect("session");
        inner.timeout_ms += d as u64;
        inner.updated_at = now_ms();
    }
    st.arm_timeout(&s);
    ok(json!({ "session": s.payload() }))
}
