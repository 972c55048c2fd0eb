//! Sprite metadata and lifecycle routes: labels (create and `PUT`), the list's `prefix` and
//! pages, and checkpoints (`POST /checkpoint`, `GET /checkpoints[/{id}]`,
//! `POST /checkpoints/{id}/restore`).
//!
//! Shapes: sprites-go `types.go` (`SpriteInfo.labels` a string list, `UpdateSpriteRequest`
//! `labels`/`clear_labels`, `Checkpoint {id, create_time, history, comment, is_auto}`,
//! `StreamMessage {type, data, error}`), sprites-py 0.7.2 (`client.py` `create_sprite`,
//! `update_sprite` (`PUT /v1/sprites/{name}`), `list_sprites` (`prefix`, `max_results`,
//! `continuation_token`), `checkpoint.py` (NDJSON answers to create and restore, a JSON list for
//! `GET /checkpoints`)).
//!
//! A checkpoint is the kit's snapshot of the sprite's writable layer (docs.sprites.dev/concepts/
//! checkpoints: "A checkpoint snapshots the writable filesystem overlay: everything you've added
//! on top of the base image … does not capture anything that only lives in memory"), taken while
//! the sprite runs on (frozen for the copy); a restore is the kit's restore in place: every
//! process ends ("Restore rewinds the filesystem. Running processes stop."), the whole writable
//! filesystem is the checkpoint's again, and the services start again from their definitions
//! ("After a restore, Services come back from their on-disk definitions … A process you started
//! by hand does not."). Without namespaces (the degraded mode) a checkpoint answers an `error`
//! line.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, Query as AxQuery, State as AxState};
use axum::response::{IntoResponse as _, Response};
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::exec::{AddressedSprite, check_auth, json_response};
use super::{Sprite, State, wire};
use execseam_emulator_kit::Snapshot;
use execseam_emulator_kit::util::rfc3339;

type St = AxState<Arc<State>>;

/// A checkpoint: its id (`v1`, `v2`, …), when, its comment, and the saved filesystem.
#[derive(Clone, Debug)]
pub(crate) struct Checkpoint {
    id: String,
    created: SystemTime,
    comment: String,
    layer: Snapshot,
}

impl Sprite {
    /// `SpriteInfo` with the sprite's labels.
    pub(crate) fn info(&self) -> Value {
        let mut v = wire::sprite(&self.name, &self.id, self.created);
        v["labels"] = json!(*self.labels.lock().expect("labels"));
        v["url"] = json!(self.url());
        v["url_settings"] = self.url_settings();
        v
    }
}

fn string_list(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| {
        a.iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    })
}

/// The labels of a create request (`CreateSpriteRequest.labels`).
pub(crate) fn set_created_labels(sprite: &Sprite, req: &Value) {
    if let Some(l) = string_list(&req["labels"]) {
        *sprite.labels.lock().expect("labels") = l;
    }
}

/// `PUT /v1/sprites/{name}`: `labels` replaces the set, `clear_labels: true` empties it,
/// `url_settings` sets the URL's auth and `private_access`; the answer is the `SpriteInfo`.
pub(crate) async fn update_sprite(
    AddressedSprite(sprite): AddressedSprite,
    body: Bytes,
) -> Response {
    let req: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => {
                return json_response(StatusCode::BAD_REQUEST, &wire::error("invalid JSON body"));
            }
        }
    };
    match crate::url::requested(&req) {
        Ok(settings) => sprite.set_url_settings(settings),
        Err(r) => return r,
    }
    if req["clear_labels"].as_bool() == Some(true) {
        sprite.labels.lock().expect("labels").clear();
    }
    if let Some(l) = string_list(&req["labels"]) {
        *sprite.labels.lock().expect("labels") = l;
    }
    json_response(StatusCode::OK, &sprite.info())
}

/// `GET /v1/sprites?prefix=&max_results=&continuation_token=`: sprites whose name starts with
/// `prefix`, by name, `max_results` a page (default 50), the token the next name.
pub(crate) async fn list_sprites(
    st: St,
    headers: HeaderMap,
    AxQuery(q): AxQuery<std::collections::HashMap<String, String>>,
) -> Response {
    if let Err(r) = check_auth(&st, &headers) {
        return r;
    }
    let prefix = q.get("prefix").map(String::as_str).unwrap_or("");
    let after = q.get("continuation_token").filter(|t| !t.is_empty());
    let max = q
        .get("max_results")
        .and_then(|m| m.parse::<usize>().ok())
        .filter(|m| *m > 0)
        .unwrap_or(50);
    let all: Vec<Arc<Sprite>> = st
        .shell
        .sandboxes()
        .lock()
        .values()
        .filter(|s| s.is_alive() && s.name.starts_with(prefix))
        .filter(|s| after.is_none_or(|a| s.name.as_str() >= a.as_str()))
        .cloned()
        .collect();
    let page: Vec<Value> = all.iter().take(max).map(|s| s.info()).collect();
    let next = all.get(max).map(|s| s.name.clone());
    json_response(
        StatusCode::OK,
        &json!({
            "sprites": page,
            "has_more": next.is_some(),
            "next_continuation_token": next,
            "running": all.len(),
        }),
    )
}

fn checkpoint_json(c: &Checkpoint) -> Value {
    let mut v = json!({"id": c.id, "create_time": rfc3339(c.created)});
    if !c.comment.is_empty() {
        v["comment"] = json!(c.comment);
    }
    v
}

fn ndjson(lines: &[Value]) -> Response {
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    (
        StatusCode::OK,
        [(http::header::CONTENT_TYPE, "application/x-ndjson")],
        body,
    )
        .into_response()
}

/// The kit's blocking snapshot and restore, off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// `POST /v1/sprites/{name}/checkpoint` `{"comment"?}`: NDJSON progress (`info` lines), the
/// checkpoint's id in the last.
pub(crate) async fn create_checkpoint(
    AddressedSprite(sprite): AddressedSprite,
    body: Bytes,
) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let comment = req["comment"].as_str().unwrap_or_default().to_owned();
    let sandbox = sprite.sandbox.clone();
    let layer = match blocking(move || sandbox.snapshot()).await {
        Ok(l) => l,
        Err(e) => {
            return ndjson(&[json!({"type": "error", "error": format!("checkpoint failed: {e}")})]);
        }
    };
    let cp = {
        let mut all = sprite.checkpoints.lock().expect("checkpoints");
        let cp = Checkpoint {
            id: format!("v{}", all.len() + 1),
            created: SystemTime::now(),
            comment,
            layer,
        };
        all.push(cp.clone());
        cp
    };
    ndjson(&[
        json!({"type": "info", "data": "Creating checkpoint..."}),
        json!({"type": "info", "data": format!("Checkpoint {} created", cp.id)}),
    ])
}

/// `GET /v1/sprites/{name}/checkpoints`: a JSON list, newest first.
pub(crate) async fn list_checkpoints(AddressedSprite(sprite): AddressedSprite) -> Response {
    let all: Vec<Value> = sprite
        .checkpoints
        .lock()
        .expect("checkpoints")
        .iter()
        .rev()
        .map(checkpoint_json)
        .collect();
    json_response(StatusCode::OK, &Value::Array(all))
}

fn find(sprite: &Sprite, id: &str) -> Option<Checkpoint> {
    sprite
        .checkpoints
        .lock()
        .expect("checkpoints")
        .iter()
        .find(|c| c.id == id)
        .cloned()
}

/// `GET /v1/sprites/{name}/checkpoints/{id}`: the checkpoint, or 404.
pub(crate) async fn get_checkpoint(
    AddressedSprite(sprite): AddressedSprite,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    match find(&sprite, &id) {
        Some(c) => json_response(StatusCode::OK, &checkpoint_json(&c)),
        None => json_response(StatusCode::NOT_FOUND, &wire::error("checkpoint not found")),
    }
}

/// `POST /v1/sprites/{name}/checkpoints/{id}/restore`: the sprite's processes end, its
/// filesystem is the checkpoint's again, its services start again; NDJSON progress. An unknown
/// id is a 404.
pub(crate) async fn restore_checkpoint(
    AddressedSprite(sprite): AddressedSprite,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    let Some(cp) = find(&sprite, &id) else {
        return json_response(StatusCode::NOT_FOUND, &wire::error("checkpoint not found"));
    };
    let sessions: Vec<_> = std::mem::take(&mut *sprite.sessions.lock().expect("sessions"))
        .into_values()
        .collect();
    for s in sessions {
        s.lose();
    }
    let sandbox = sprite.sandbox.clone();
    let layer = cp.layer.clone();
    match blocking(move || sandbox.restore(&layer)).await {
        Ok(()) => {
            super::services::restart_all(&sprite).await;
            ndjson(&[
                json!({"type": "info", "data": format!("Restoring checkpoint {id}...")}),
                json!({"type": "info", "data": format!("Checkpoint {id} restored")}),
            ])
        }
        Err(e) => ndjson(&[json!({"type": "error", "error": format!("restore failed: {e}")})]),
    }
}
