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
}

fn dto(state: &State, s: &SandboxEntry, status: &str) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "organizationId": super::ORG,
        "name": s.name,
        "user": "daytona",
        "env": s.env,
        "labels": s.labels,
        "public": false,
        "networkBlockAll": false,
        "kvm": false,
        "target": "us",
        "cpu": 1,
        "gpu": 0,
        "memory": 1,
        "disk": 3,
        "state": status,
        "desiredState": if status == "destroying" { "destroyed" } else { "started" },
        "snapshot": "daytonaio/sandbox:0.4.3",
        "autoStopInterval": 15,
        "autoArchiveInterval": 10080,
        "autoDeleteInterval": -1,
        "createdAt": s.created_at,
        "updatedAt": s.created_at,
        "daemonVersion": "0.226.1",
        "toolboxProxyUrl": format!("{}/toolbox", state.base_url),
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
    let entry = Arc::new(SandboxEntry {
        name: req.name.unwrap_or_else(|| id.clone()),
        id: id.clone(),
        created_at: super::files::rfc3339(std::time::SystemTime::now()),
        env: req.env,
        labels,
        sandbox,
        sessions: Mutex::new(Default::default()),
    });
    state
        .sandboxes
        .lock()
        .expect("sandboxes")
        .insert(id, entry.clone());
    // NestJS @HttpCode(200): create answers 200, not 201.
    json_response(StatusCode::OK, &dto(&state, &entry, "started"))
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
        Some(s) => json_response(StatusCode::OK, &dto(&state, &s, "started")),
        None => not_found(&id, &uri, &method),
    }
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct ListQuery {
    labels: Option<String>,
    page: Option<usize>,
    limit: Option<usize>,
}

/// `GET /sandbox` and `GET /sandbox/paginated`: `labels` is a JSON object (the SDKs send
/// `json.dumps(labels)`, `daytona/_sync/daytona.py` `list`) and a sandbox matches when it
/// carries every pair; pages are 1-based, 10 items by default, as the API documents.
pub(super) async fn list(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
    axum::extract::Query(q): axum::extract::Query<ListQuery>,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    let filter: BTreeMap<String, String> = match q.labels.as_deref().filter(|l| !l.is_empty()) {
        None => BTreeMap::new(),
        Some(l) => match serde_json::from_str(l) {
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
    let mut items: Vec<_> = state
        .sandboxes
        .lock()
        .expect("sandboxes")
        .values()
        .filter(|s| filter.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| (s.id.clone(), dto(&state, s, "started")))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let items: Vec<_> = items.into_iter().map(|(_, v)| v).collect();
    if !uri.path().ends_with("/paginated") {
        return json_response(StatusCode::OK, &serde_json::Value::Array(items));
    }
    let total = items.len();
    let limit = q.limit.unwrap_or(10).max(1);
    let page = q.page.unwrap_or(1).max(1);
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
    let body = dto(&state, &s, "destroying");
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
        &serde_json::json!({"url": format!("{}/toolbox", state.base_url)}),
    )
}
