//! The control plane: `/api/sandbox…` (NestJS in the real service).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde::Deserialize;

use super::{SandboxEntry, State, authorized, envelope, json_response, unauthorized};
use crate::harness::Sandbox;

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct CreateSandbox {
    name: Option<String>,
    env: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    target: Option<String>,
    auto_stop_interval: Option<u64>,
}

/// The base URL the client reached: a reverse proxy's `x-forwarded-host` (the chaos proxy sets
/// it), else the emulator's own. The toolbox proxy URL is built on it, so an SDK that reached the
/// API through a proxy sends its toolbox requests through the same proxy (the real service
/// answers its own proxy's fixed URL).
fn reached(state: &State, headers: &HeaderMap) -> String {
    headers
        .get(crate::chaos::FORWARDED_HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .map_or_else(|| state.base_url.clone(), |h| format!("http://{h}"))
}

fn dto(
    state: &State,
    headers: &HeaderMap,
    s: &SandboxEntry,
    status: Option<&str>,
) -> serde_json::Value {
    let life = s.life.lock().expect("life");
    let status = status.unwrap_or(life.state);
    serde_json::json!({
        "id": s.id,
        "organizationId": super::ORG,
        "name": s.name,
        "user": "daytona",
        "env": s.env,
        "labels": life.labels,
        "public": false,
        "networkBlockAll": false,
        "kvm": false,
        "target": "us",
        "cpu": 1,
        "gpu": 0,
        "memory": 1,
        "disk": 3,
        "state": status,
        "desiredState": if status == "destroying" { "destroyed" } else { status },
        "snapshot": "daytonaio/sandbox:0.4.3",
        "autoStopInterval": life.auto_stop,
        "autoArchiveInterval": 10080,
        "autoDeleteInterval": -1,
        "createdAt": s.created_at,
        "updatedAt": life.updated_at,
        "daemonVersion": "0.226.1",
        "toolboxProxyUrl": format!("{}/toolbox", reached(state, headers)),
    })
}

fn check(state: &State, headers: &HeaderMap, uri: &Uri, method: &Method) -> Option<Response> {
    (!authorized(state, headers)).then(|| unauthorized("DAYTONA_API", uri.path(), method.as_str()))
}

fn not_found(id: &str, uri: &Uri, method: &Method) -> Response {
    envelope(
        StatusCode::NOT_FOUND,
        &format!("Sandbox with ID or name {id} not found"),
        Some("NOT_FOUND"),
        "DAYTONA_API",
        uri.path(),
        method.as_str(),
    )
}

pub(super) async fn create(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
    body: Bytes,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    if let Some(f) = state.faults.take("create")
        && let Some(r) = super::process::generic_fault(f, "DAYTONA_API", uri.path(), "POST").await
    {
        return r;
    }
    let req: CreateSandbox = if body.is_empty() {
        CreateSandbox::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return envelope(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid body: {e}"),
                    None,
                    "DAYTONA_API",
                    uri.path(),
                    "POST",
                );
            }
        }
    };
    let _ = req.target;
    let id = super::uuid_v4();
    let sandbox = match Sandbox::create(id.clone(), state.spec(), &state.sandboxing) {
        Ok(s) => s,
        Err(e) => {
            return envelope(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot create the sandbox: {e}"),
                None,
                "DAYTONA_API",
                uri.path(),
                "POST",
            );
        }
    };
    let mut labels = req.labels;
    labels
        .entry("code-toolbox-language".into())
        .or_insert_with(|| "python".into());
    let now = super::files::rfc3339(std::time::SystemTime::now());
    let entry = Arc::new(SandboxEntry {
        name: req.name.unwrap_or_else(|| id.clone()),
        id: id.clone(),
        created_at: now.clone(),
        env: req.env,
        life: Mutex::new(super::Life::new(
            labels,
            now,
            req.auto_stop_interval.unwrap_or(15),
        )),
        sandbox,
        sessions: Mutex::new(Default::default()),
    });
    state
        .sandboxes
        .lock()
        .expect("sandboxes")
        .insert(id, entry.clone());
    // NestJS @HttpCode(200): create answers 200, not 201.
    json_response(StatusCode::OK, &dto(&state, &headers, &entry, None))
}

pub(super) async fn get_one(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    match state.sandbox(&id) {
        Some(s) => json_response(StatusCode::OK, &dto(&state, &headers, &s, None)),
        None => not_found(&id, &uri, &method),
    }
}

/// The query pairs, percent-decoded, repeated keys kept (`states` is `multi`: one pair per state,
/// `daytona_api_client/api/sandbox_api.py` `_list_sandboxes_serialize`).
fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// `GET /sandbox` (SDK 0.226.1: `ListSandboxesResponse {items, nextCursor}`, cursor pages) and
/// `GET /sandbox/paginated` (`{items, total, page, totalPages}`). `labels` is a JSON object (the
/// SDK sends `json.dumps(labels)`, `daytona/_sync/daytona.py` `_fetch_sandbox_page`) and a
/// sandbox matches when it carries every pair; `states` (repeated or comma-separated), `id` and
/// `name` filter too; `limit` bounds a page.
pub(super) async fn list(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let q = query_pairs(&uri);
    let get = |k: &str| {
        q.iter()
            .find(|(key, v)| key == k && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let filter: BTreeMap<String, String> = match get("labels") {
        None => BTreeMap::new(),
        Some(l) => match serde_json::from_str(&l) {
            Ok(f) => f,
            Err(_) => {
                return envelope(
                    StatusCode::BAD_REQUEST,
                    "Invalid labels JSON",
                    Some("BAD_REQUEST"),
                    "DAYTONA_API",
                    uri.path(),
                    method.as_str(),
                );
            }
        },
    };
    let states: Vec<String> = q
        .iter()
        .filter(|(k, _)| k == "states" || k == "states[]")
        .flat_map(|(_, v)| v.split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .collect();
    let (id, name) = (get("id"), get("name"));
    let mut items: Vec<_> = state
        .sandboxes
        .lock()
        .expect("sandboxes")
        .values()
        .filter(|s| {
            let life = s.life.lock().expect("life");
            filter.iter().all(|(k, v)| life.labels.get(k) == Some(v))
                && (states.is_empty() || states.iter().any(|st| st == life.state))
                && id.as_ref().is_none_or(|i| *i == s.id)
                && name.as_ref().is_none_or(|n| *n == s.name)
        })
        .map(|s| (s.id.clone(), dto(&state, &headers, s, None)))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let items: Vec<_> = items.into_iter().map(|(_, v)| v).collect();
    let total = items.len();
    let limit = get("limit").and_then(|l| l.parse::<usize>().ok());
    if !uri.path().ends_with("/paginated") {
        let from = get("cursor")
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0);
        let limit = limit.unwrap_or(100).max(1);
        let page: Vec<_> = items.into_iter().skip(from).take(limit).collect();
        let next = (from + limit < total).then(|| (from + limit).to_string());
        return json_response(
            StatusCode::OK,
            &serde_json::json!({"items": page, "nextCursor": next}),
        );
    }
    let limit = limit.unwrap_or(10).max(1);
    let page = get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let pages = total.div_ceil(limit).max(1);
    let items: Vec<_> = items
        .into_iter()
        .skip((page - 1) * limit)
        .take(limit)
        .collect();
    json_response(
        StatusCode::OK,
        &serde_json::json!({"items": items, "total": total, "page": page, "totalPages": pages}),
    )
}

fn sandbox_error(message: &str, uri: &Uri, method: &Method) -> Response {
    envelope(
        StatusCode::BAD_REQUEST,
        message,
        Some("BAD_REQUEST"),
        "DAYTONA_API",
        uri.path(),
        method.as_str(),
    )
}

/// `POST /sandbox/{id}/start` (`sandbox.service.ts` `start`): a stopped or archived sandbox
/// starts (at once here: no `starting` state is observed), a started one is returned as is.
pub(super) async fn start(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let Some(s) = state.sandbox(&id) else {
        return not_found(&id, &uri, &method);
    };
    {
        let mut life = s.life.lock().expect("life");
        if life.state != "started" {
            life.state = "started";
            life.touch();
        }
    }
    json_response(StatusCode::OK, &dto(&state, &headers, &s, None))
}

/// `POST /sandbox/{id}/stop` (`sandbox.service.ts` `stop`): only a started sandbox stops
/// ("Sandbox is not in a stoppable state"); its processes die, its filesystem stays.
pub(super) async fn stop(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let Some(s) = state.sandbox(&id) else {
        return not_found(&id, &uri, &method);
    };
    if s.life.lock().expect("life").state != "started" {
        return sandbox_error("Sandbox is not in a stoppable state", &uri, &method);
    }
    s.stop();
    json_response(StatusCode::OK, &dto(&state, &headers, &s, None))
}

/// `POST /sandbox/{id}/archive` (`sandbox.service.ts` `archive`): only a stopped sandbox
/// ("Sandbox is not stopped"); its files are kept (start brings it back).
pub(super) async fn archive(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let Some(s) = state.sandbox(&id) else {
        return not_found(&id, &uri, &method);
    };
    {
        let mut life = s.life.lock().expect("life");
        if life.state != "stopped" {
            drop(life);
            return sandbox_error("Sandbox is not stopped", &uri, &method);
        }
        life.state = "archived";
        life.touch();
    }
    json_response(StatusCode::OK, &dto(&state, &headers, &s, None))
}

#[derive(Deserialize)]
struct Labels {
    labels: BTreeMap<String, String>,
}

/// `PUT /sandbox/{id}/labels` `{"labels": {...}}` (`replaceLabels`: the whole set is replaced);
/// answers `SandboxLabels`.
pub(super) async fn replace_labels(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
    body: Bytes,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let Some(s) = state.sandbox(&id) else {
        return not_found(&id, &uri, &method);
    };
    let Ok(req) = serde_json::from_slice::<Labels>(&body) else {
        return sandbox_error("labels must be an object of strings", &uri, &method);
    };
    let mut life = s.life.lock().expect("life");
    life.labels = req.labels;
    life.touch();
    json_response(StatusCode::OK, &serde_json::json!({"labels": life.labels}))
}

/// `POST /sandbox/{id}/autostop/{interval}` (`setAutostopInterval`): minutes of inactivity
/// before the sandbox stops, 0 disables it; a negative or non-integer interval is a 400.
pub(super) async fn set_autostop(
    AxState(state): AxState<Arc<State>>,
    Path((id, interval)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let Some(s) = state.sandbox(&id) else {
        return not_found(&id, &uri, &method);
    };
    let Ok(minutes) = interval.parse::<u64>() else {
        return sandbox_error(
            "Auto-stop interval must be a non-negative integer",
            &uri,
            &method,
        );
    };
    {
        let mut life = s.life.lock().expect("life");
        life.auto_stop = minutes;
        life.touch();
    }
    json_response(StatusCode::OK, &dto(&state, &headers, &s, None))
}

pub(super) async fn delete(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let Some(s) = state.sandbox(&id) else {
        return not_found(&id, &uri, &method);
    };
    let body = dto(&state, &headers, &s, Some("destroying"));
    state.destroy(&s.id);
    json_response(StatusCode::OK, &body)
}

pub(super) async fn proxy_url(
    AxState(state): AxState<Arc<State>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    if state.sandbox(&id).is_none() {
        return not_found(&id, &uri, &method);
    }
    json_response(
        StatusCode::OK,
        &serde_json::json!({"url": format!("{}/toolbox", reached(&state, &headers))}),
    )
}
