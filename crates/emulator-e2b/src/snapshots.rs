//! Pause, snapshot templates and forks, as E2B's API answers them (`e2b-dev/infra`
//! `packages/api/internal/handlers/{sandbox_pause,snapshot_template_create,snapshot_template_list,
//! template_delete,sandbox_fork}.go`), on the emulator kit's real mechanisms: a pause freezes the
//! sandbox's processes (the cgroup freezer), a snapshot copies its upper layer while frozen, a
//! sandbox created from a snapshot (or forked) starts over that copy.
//!
//! Deviation (documented in `docs/adapters/e2b.md`): E2B's snapshots and forks are memory
//! snapshots (processes resume in the new sandbox); here only the files are carried (no CRIU on
//! this machine), and the new sandbox's processes start fresh. A pause with `memory: false`
//! (filesystem only) kills the processes, as E2B's cold boot on resume does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::{
    Addressed, Keyed, Sbx, State, not_found_sandbox, optional_json, plain_error, plain_json,
    random_id, sandbox_json,
};

/// The team slug snapshot names are namespaced with (`<team>/<name>:<tag>`).
pub const TEAM_SLUG: &str = "emulator";
/// The tag of every snapshot (`id.DefaultTag`).
const DEFAULT_TAG: &str = "default";
/// `maxForkCount` in `sandbox_fork.go`.
const MAX_FORK_COUNT: u64 = 100;

/// One snapshot template.
pub(crate) struct Snap {
    layer: execseam_emulator_kit::Snapshot,
    source: String,
    names: Vec<String>,
    created: SystemTime,
}

fn info_json(id: &str, s: &Snap) -> Value {
    json!({ "snapshotID": id, "names": s.names })
}

/// The snapshot id `template` names: itself, or with the default tag added.
fn key_of(state: &State, template: &str) -> Option<String> {
    let snaps = state.snapshots.lock().expect("snapshots");
    [template.to_owned(), format!("{template}:{DEFAULT_TAG}")]
        .into_iter()
        .find(|k| snaps.contains_key(k))
}

fn template_not_found(template: &str) -> Response {
    plain_error(
        StatusCode::NOT_FOUND,
        format!("template '{template}' not found"),
    )
}

/// The layer a create's `templateID` starts from: a snapshot's, `None` for an ordinary template
/// (the emulator has every template), and the template cache's 404 for a snapshot-shaped id
/// (`<id>:<tag>` or `<team>/<name>`) that does not exist (never created, or deleted).
pub(crate) fn resolve(
    state: &State,
    template: &str,
) -> Result<Option<execseam_emulator_kit::Snapshot>, Response> {
    if let Some(k) = key_of(state, template) {
        let snaps = state.snapshots.lock().expect("snapshots");
        return Ok(snaps.get(&k).map(|s| s.layer.clone()));
    }
    if template.contains([':', '/']) {
        return Err(template_not_found(template));
    }
    Ok(None)
}

/// Freezes a sandbox's processes (the cgroup freezer; `SIGSTOP` where the kit cannot freeze).
async fn freeze(s: &Arc<Sbx>, kill_first: bool) -> std::io::Result<()> {
    let sandbox = s.sandbox.clone();
    tokio::task::spawn_blocking(move || {
        if kill_first {
            sandbox.kill_processes();
        }
        match sandbox.pause() {
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                sandbox.signal_processes(libc::SIGSTOP);
                Ok(())
            }
            other => other,
        }
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// The sandbox's files as a layer to start others from (`None` when they cannot be read).
async fn layer_of(s: &Sbx) -> Option<execseam_emulator_kit::Snapshot> {
    let sandbox = s.sandbox.clone();
    match tokio::task::spawn_blocking(move || sandbox.snapshot()).await {
        Ok(Ok(l)) => Some(l),
        _ => None,
    }
}

/// Thaws a paused sandbox (the connect that resumes it).
pub(crate) async fn thaw(s: &Arc<Sbx>) {
    let sandbox = s.sandbox.clone();
    let _ = tokio::task::spawn_blocking(move || {
        if sandbox.resume().is_err() {
            sandbox.signal_processes(libc::SIGCONT);
        }
    })
    .await;
}

/// `POST /sandboxes/{id}/pause` (`sandbox_pause.go`): 204; 409 when already paused. The body is
/// optional; `memory: false` is a filesystem-only pause (`filesystemOnly := body.Memory != nil
/// && !*body.Memory`): the processes end and a resume boots from the disk.
pub(crate) async fn pause(Addressed(id, s): Addressed, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let filesystem_only = req.get("memory").and_then(Value::as_bool) == Some(false);
    if s.paused.swap(true, Ordering::SeqCst) {
        return plain_error(
            StatusCode::CONFLICT,
            format!("Error pausing sandbox - sandbox '{id}' is already paused"),
        );
    }
    if freeze(&s, filesystem_only).await.is_err() {
        s.paused.store(false, Ordering::SeqCst);
        return plain_error(StatusCode::INTERNAL_SERVER_ERROR, "Error pausing sandbox");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /sandboxes/{id}/snapshots` (`snapshot_template_create.go`): 201 `SnapshotInfo
/// {snapshotID, names}`. Without a name the id is a new template's, `<template>:default`; with
/// one, `<team>/<name>:default` (a name that exists gets a new build). The source is frozen
/// while its layer is copied and runs on with the same id.
pub(crate) async fn create(Keyed(state): Keyed, Path(id): Path<String>, body: Bytes) -> Response {
    let req = match optional_json(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(s) = state.get(&id) else {
        return not_found_sandbox(&id);
    };
    let name = req.get("name").and_then(Value::as_str).map(str::to_owned);
    if let Some(n) = &name
        && (n.is_empty()
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return plain_error(
            StatusCode::BAD_REQUEST,
            format!("Invalid name: {n:?} must be lowercase letters, digits, '-', '_' or '.'"),
        );
    }
    let Some(layer) = layer_of(&s).await else {
        return plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Error creating snapshot template",
        );
    };
    let (snapshot_id, names) = match name {
        Some(n) => {
            let full = format!("{TEAM_SLUG}/{n}");
            (format!("{full}:{DEFAULT_TAG}"), vec![full])
        }
        None => (format!("{}:{DEFAULT_TAG}", random_id(20)), Vec::new()),
    };
    let snap = Snap {
        layer,
        source: id,
        names,
        created: SystemTime::now(),
    };
    let body = info_json(&snapshot_id, &snap);
    state
        .snapshots
        .lock()
        .expect("snapshots")
        .insert(snapshot_id, snap);
    plain_json(StatusCode::CREATED, body)
}

/// `GET /snapshots?sandboxID=&name=` (`snapshot_template_list.go`): the team's snapshots, newest
/// first, one page (no `x-next-token`).
pub(crate) async fn list(
    Keyed(state): Keyed,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let sandbox = q.get("sandboxID").filter(|s| !s.is_empty());
    let name = q.get("name").filter(|s| !s.is_empty());
    let snaps = state.snapshots.lock().expect("snapshots");
    let mut rows: Vec<(&String, &Snap)> = snaps
        .iter()
        .filter(|(_, s)| sandbox.is_none_or(|id| &s.source == id))
        .filter(|(k, s)| {
            name.is_none_or(|n| {
                s.names
                    .iter()
                    .any(|m| m == n || m.ends_with(&format!("/{n}")))
                    || k.starts_with(n.as_str())
            })
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.created));
    let v: Vec<Value> = rows.into_iter().map(|(k, s)| info_json(k, s)).collect();
    plain_json(StatusCode::OK, Value::Array(v))
}

/// `DELETE /templates/{id}` (`template_delete.go`) for a snapshot template: 204; 404 when it
/// does not exist; 400 while a running sandbox uses it.
pub(crate) async fn delete(Keyed(state): Keyed, Path(template): Path<String>) -> Response {
    let Some(key) = key_of(&state, &template) else {
        return template_not_found(&template);
    };
    let in_use = state
        .shell
        .sandboxes()
        .keys()
        .into_iter()
        .filter_map(|id| state.get(&id))
        .any(|s| s.template == key || key_of(&state, &s.template).as_deref() == Some(&key));
    if in_use {
        return plain_error(
            StatusCode::BAD_REQUEST,
            format!(
                "cannot delete template '{template}' because there are running sandboxes using it"
            ),
        );
    }
    state.snapshots.lock().expect("snapshots").remove(&key);
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /sandboxes/{id}/fork` (`sandbox_fork.go`): body `{timeout?: 15, count?: 1}`; the source
/// is checkpointed in place and runs on; 201 with one `{sandbox}` (or `{error}`) per fork; 409
/// for a paused source.
pub(crate) async fn fork(Keyed(state): Keyed, Path(id): Path<String>, body: Bytes) -> Response {
    let req = match optional_json(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let count = req.get("count").and_then(Value::as_u64).unwrap_or(1);
    let timeout = req.get("timeout").and_then(Value::as_u64).unwrap_or(15);
    if count < 1 {
        return plain_error(StatusCode::BAD_REQUEST, "Count must be at least 1");
    }
    if count > MAX_FORK_COUNT {
        return plain_error(
            StatusCode::BAD_REQUEST,
            format!("Count cannot be greater than {MAX_FORK_COUNT}"),
        );
    }
    let Some(s) = state.get(&id) else {
        return not_found_sandbox(&id);
    };
    if s.is_paused() {
        return plain_error(
            StatusCode::CONFLICT,
            format!("Sandbox '{id}' is paused and cannot be forked; resume it first"),
        );
    }
    let Some(layer) = layer_of(&s).await else {
        return plain_error(StatusCode::INTERNAL_SERVER_ERROR, "Error forking sandbox");
    };
    let mut results = Vec::new();
    for _ in 0..count {
        let (state, s, layer) = (state.clone(), s.clone(), layer.clone());
        let made = tokio::task::spawn_blocking(move || {
            state.create_over(
                &s.template,
                Duration::from_secs(timeout),
                s.env_vars.clone(),
                s.metadata.clone(),
                Some(&layer),
            )
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        results.push(match made {
            Ok(f) => json!({ "sandbox": sandbox_json(&f) }),
            Err(e) => json!({ "error": { "code": 500, "message": format!("error creating forked sandbox: {e}") } }),
        });
    }
    plain_json(StatusCode::CREATED, Value::Array(results))
}
