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
//! A checkpoint here holds the sprite's home (`/home/sprite`: files, directories, symlinks and
//! modes), read through the sandbox; a restore kills the sprite's processes and puts the home
//! back as it was. A real checkpoint covers the whole filesystem (documented in
//! `docs/adapters/sprites.md`).

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, Query as AxQuery, State as AxState};
use axum::response::{IntoResponse as _, Response};
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::exec::{AddressedSprite, check_auth, json_response};
use super::{HOME, Sprite, State, wire};
use execseam_emulator_kit::util::rfc3339;

type St = AxState<Arc<State>>;

/// One saved entry of a checkpoint, relative to the home.
#[derive(Clone, Debug)]
enum Entry {
    Dir(String, u32),
    File(String, u32, Vec<u8>),
    Link(String, String),
}

/// A checkpoint: its id (`v1`, `v2`, …), when, its comment, and the saved home.
#[derive(Clone, Debug)]
pub(crate) struct Checkpoint {
    id: String,
    created: SystemTime,
    comment: String,
    entries: Arc<Vec<Entry>>,
}

impl Sprite {
    /// `SpriteInfo` with the sprite's labels.
    pub(crate) fn info(&self) -> Value {
        let mut v = wire::sprite(&self.name, &self.id, self.created);
        v["labels"] = json!(*self.labels.lock().expect("labels"));
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

/// `PUT /v1/sprites/{name}`: `labels` replaces the set, `clear_labels: true` empties it; the
/// answer is the `SpriteInfo`.
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

fn save_home(fs: &execseam_emulator_kit::Fs) -> std::io::Result<Vec<Entry>> {
    fn walk(
        fs: &execseam_emulator_kit::Fs,
        rel: &str,
        out: &mut Vec<Entry>,
    ) -> std::io::Result<()> {
        let dir = fs.path(&format!("{HOME}{rel}"));
        let mut names: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = format!("{rel}/{name}");
            let md = std::fs::symlink_metadata(e.path())?;
            let mode = md.permissions().mode() & 0o7777;
            if md.file_type().is_symlink() {
                let t = std::fs::read_link(e.path())?;
                out.push(Entry::Link(r, t.to_string_lossy().into_owned()));
            } else if md.is_dir() {
                out.push(Entry::Dir(r.clone(), mode));
                walk(fs, &r, out)?;
            } else if md.is_file() {
                out.push(Entry::File(r, mode, std::fs::read(e.path())?));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(fs, "", &mut out)?;
    Ok(out)
}

fn restore_home(
    fs: &execseam_emulator_kit::Fs,
    entries: &[Entry],
    uid: u32,
) -> std::io::Result<()> {
    let home = fs.path(HOME);
    for e in std::fs::read_dir(&home)? {
        let p = e?.path();
        if std::fs::symlink_metadata(&p)?.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    for e in entries {
        match e {
            Entry::Dir(r, mode) => {
                let p = fs.path(&format!("{HOME}{r}"));
                std::fs::create_dir(&p)?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))?;
                let _ = std::os::unix::fs::lchown(&p, Some(uid), Some(uid));
            }
            Entry::File(r, mode, data) => {
                let p = fs.path(&format!("{HOME}{r}"));
                std::fs::write(&p, data)?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))?;
                let _ = std::os::unix::fs::lchown(&p, Some(uid), Some(uid));
            }
            Entry::Link(r, target) => {
                let p = fs.path(&format!("{HOME}{r}"));
                symlink(target, &p)?;
                let _ = std::os::unix::fs::lchown(&p, Some(uid), Some(uid));
            }
        }
    }
    Ok(())
}

/// `POST /v1/sprites/{name}/checkpoint` `{"comment"?}`: NDJSON progress (`info` lines), the
/// checkpoint's id in the last.
pub(crate) async fn create_checkpoint(
    AddressedSprite(sprite): AddressedSprite,
    body: Bytes,
) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let comment = req["comment"].as_str().unwrap_or_default().to_owned();
    let entries = match sprite.sandbox.fs(save_home).await {
        Ok(e) => e,
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
            entries: Arc::new(entries),
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

/// `POST /v1/sprites/{name}/checkpoints/{id}/restore`: the sprite's processes end, its home is
/// the checkpoint's again; NDJSON progress. An unknown id is a 404.
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
    sprite.sandbox.kill_processes();
    let uid = sprite.sandbox.user().uid;
    let entries = cp.entries.clone();
    match sprite
        .sandbox
        .fs(move |fs| restore_home(fs, &entries, uid))
        .await
    {
        Ok(()) => ndjson(&[
            json!({"type": "info", "data": format!("Restoring checkpoint {id}...")}),
            json!({"type": "info", "data": format!("Checkpoint {id} restored")}),
        ]),
        Err(e) => ndjson(&[json!({"type": "error", "error": format!("restore failed: {e}")})]),
    }
}
