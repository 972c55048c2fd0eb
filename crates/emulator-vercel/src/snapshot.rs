//! Snapshots: `POST /v2/sandboxes/sessions/{id}/snapshot`, `GET /v2/sandboxes/snapshots`,
//! `GET|DELETE /v2/sandboxes/snapshots/{id}`, and a create's `source: {type: "snapshot"}`.
//!
//! Sources: `vercel-sandbox` 0.10.0 `_internal/api_client.py` (`create_snapshot`,
//! `query_snapshots`, `get_snapshot`, `delete_snapshot`, `_SnapshotPayload`,
//! `_CreateSnapshotResponse`, `SnapshotSource`), and vercel.com/docs/sandbox/concepts/snapshots:
//! "Once you create a snapshot, the sandbox shuts down automatically" (the session stops; a
//! later use resumes the sandbox in a new session) and "Snapshots expire after 30 days by
//! default". `expiration` is in ms, `0` never expires (`SnapshotExpiration`: "Zero disables
//! expiration"). Inferred, not documented: the `snap_` id prefix, a deleted or expired snapshot
//! being a 404 on `get` and on a create from it, and a snapshot of a stopped session being the
//! 410 every other session operation answers.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use execseam_emulator_kit::Snapshot;
use serde_json::{Map, Value, json};

use super::routes::{
    St, api_error, bad_request, json_body, not_found, ok, query, query_get, stopped,
};
use super::state::{State, new_id, now_ms};

/// The service's default lifetime of a snapshot: 30 days, in ms.
const DEFAULT_EXPIRATION_MS: u64 = 30 * 24 * 3600 * 1000;

/// One snapshot: the copy of a sandbox's filesystem and what the API says of it.
pub(crate) struct VercelSnapshot {
    pub(crate) id: String,
    pub(crate) source_session_id: String,
    pub(crate) sandbox_name: String,
    pub(crate) project_id: String,
    pub(crate) layer: Snapshot,
    pub(crate) created_at: u64,
    pub(crate) expires_at: Option<u64>,
}

impl VercelSnapshot {
    /// `_SnapshotPayload`, with `status` `created` or `deleted`.
    fn payload(&self, status: &str) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("sourceSessionId".into(), json!(self.source_session_id));
        m.insert("region".into(), json!(super::state::REGION));
        m.insert("status".into(), json!(status));
        m.insert("sizeBytes".into(), json!(self.layer.size_bytes()));
        if let Some(t) = self.expires_at {
            m.insert("expiresAt".into(), json!(t));
        }
        m.insert("createdAt".into(), json!(self.created_at));
        m.insert("updatedAt".into(), json!(self.created_at));
        Value::Object(m)
    }
}

impl State {
    /// The snapshot `id` if it exists and has not expired (an expired one is dropped here).
    pub(crate) fn snapshot(&self, id: &str) -> Option<Arc<VercelSnapshot>> {
        let mut all = self.snapshots.lock().expect("snapshots");
        let s = all.get(id)?.clone();
        if s.expires_at.is_some_and(|t| t <= now_ms()) {
            all.remove(id);
            return None;
        }
        Some(s)
    }
}

/// `POST /v2/sandboxes/sessions/{id}/snapshot {expiration?}` → `{snapshot, session}`: the
/// session stops, then its filesystem is copied; the sandbox's `currentSnapshotId` is the new
/// snapshot.
pub(crate) async fn create(st: St, Path(sid): Path<String>, body: Bytes) -> Response {
    let Some(session) = st.session(&sid) else {
        return not_found("Session", &sid);
    };
    if !session.is_running() {
        return stopped();
    }
    let body = match json_body(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let sb = st.sandbox(&session.sandbox_name);
    let expiration = match body.get("expiration") {
        None | Some(Value::Null) => sb
            .as_ref()
            .and_then(|sb| sb.spec.snapshot_expiration)
            .unwrap_or(DEFAULT_EXPIRATION_MS),
        Some(v) => match v.as_u64() {
            Some(ms) => ms,
            None => return bad_request("expiration must be a non-negative number of ms"),
        },
    };
    session.stop();
    let root = session.root.clone();
    let layer = match tokio::task::spawn_blocking(move || root.snapshot()).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return internal(&format!("cannot snapshot the filesystem: {e}")),
        Err(e) => return internal(&format!("the snapshot task failed: {e}")),
    };
    let now = now_ms();
    let snap = Arc::new(VercelSnapshot {
        id: new_id("snap"),
        source_session_id: sid,
        sandbox_name: session.sandbox_name.clone(),
        project_id: session.project_id.clone(),
        layer,
        created_at: now,
        expires_at: (expiration > 0).then(|| now + expiration),
    });
    st.snapshots
        .lock()
        .expect("snapshots")
        .insert(snap.id.clone(), snap.clone());
    if let Some(sb) = sb {
        let mut inner = sb.inner.lock().expect("sandbox");
        inner.current_snapshot_id = Some(snap.id.clone());
        inner.status_updated_at = now;
        inner.updated_at = now;
    }
    ok(json!({ "snapshot": snap.payload("created"), "session": session.payload() }))
}

/// `GET /v2/sandboxes/snapshots?project=&name=&sortOrder=&limit=&cursor=`: the live snapshots,
/// newest first unless `sortOrder=asc`, of one sandbox when `name` is given, a page at a time
/// (`api-client.ts` `listSnapshots` sends `limit` and `cursor`; `validators.ts`
/// `SnapshotsResponse.pagination` is `CursorPagination {count, next}`, which `Snapshot.list`'s
/// paginator follows while `next` is not null).
pub(crate) async fn list(st: St, uri: Uri) -> Response {
    let q = query(&uri);
    let project = query_get(&q, "project");
    let name = query_get(&q, "name");
    let ids: Vec<String> = st
        .snapshots
        .lock()
        .expect("snapshots")
        .keys()
        .cloned()
        .collect();
    let mut snaps: Vec<_> = ids
        .iter()
        .filter_map(|id| st.snapshot(id))
        .filter(|s| project.is_none_or(|p| s.project_id == p))
        .filter(|s| name.is_none_or(|n| s.sandbox_name == n))
        .collect();
    snaps.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    if query_get(&q, "sortOrder") != Some("asc") {
        snaps.reverse();
    }
    ok(super::routes::paged("snapshots", &q, &snaps, |s| {
        s.payload("created")
    }))
}

/// `GET /v2/sandboxes/snapshots/{id}` → `{snapshot}`.
pub(crate) async fn get(st: St, Path(id): Path<String>) -> Response {
    match st.snapshot(&id) {
        Some(s) => ok(json!({ "snapshot": s.payload("created") })),
        None => not_found("Snapshot", &id),
    }
}

/// `DELETE /v2/sandboxes/snapshots/{id}` → `{snapshot}` with `status: "deleted"`; the copy is
/// gone (sandboxes made from it keep their own).
pub(crate) async fn delete(st: St, Path(id): Path<String>, _body: Bytes) -> Response {
    let Some(s) = st.snapshot(&id) else {
        return not_found("Snapshot", &id);
    };
    st.snapshots.lock().expect("snapshots").remove(&id);
    ok(json!({ "snapshot": s.payload("deleted") }))
}

/// A create's `source`: `{type: "snapshot", snapshotId}` is the live snapshot (404 otherwise);
/// `git` and `tarball` need a network the emulator does not have (400).
pub(crate) fn source(
    st: &State,
    body: &Map<String, Value>,
) -> Result<Option<Arc<VercelSnapshot>>, Response> {
    let Some(src) = body.get("source").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match src.get("type").and_then(Value::as_str) {
        Some("snapshot") => {
            let Some(id) = src.get("snapshotId").and_then(Value::as_str) else {
                return Err(bad_request("source.snapshotId is required"));
            };
            st.snapshot(id)
                .map(Some)
                .ok_or_else(|| not_found("Snapshot", id))
        }
        kind => Err(bad_request(&format!(
            "source {:?} is not supported by the emulator (it has no network to fetch from)",
            kind.unwrap_or("?")
        ))),
    }
}

fn internal(message: &str) -> Response {
    api_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_server_error",
        message,
    )
}
