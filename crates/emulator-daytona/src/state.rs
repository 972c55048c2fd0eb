//! Sandbox state on the control plane: snapshots of a sandbox (`POST /sandbox/{id}/snapshot`,
//! `GET|DELETE /snapshots…`, create with `snapshot`), preview links (`GET
//! /sandbox/{id}/ports/{port}/preview-url` and the preview proxy on `{port}-{id}.proxy.localhost`),
//! signed preview URLs (`…/signed-preview-url`, `…/signed-preview-url/{token}/expire`, the proxy
//! on `{port}-{token}.proxy.localhost` with no header; the proxy's auth cookie is not set),
//! and the answers of the routes a container sandbox cannot take (`pause`, `fork`).
//!
//! Sources: `daytonaio/daytona` v0.190.0 (`b5a5d9e78`) `apps/api/src/sandbox/services/
//! sandbox.service.ts` (`createSnapshotFromSandbox`, `runV0SnapshotFromSandbox`,
//! `getPortPreviewUrl`, `getSignedPortPreviewUrl`, `expireSignedPreviewUrlToken`, `pause`, `forkSandbox`, create's snapshot lookup), `controllers/
//! snapshot.controller.ts`, `services/snapshot.service.ts`, `apps/proxy/pkg/proxy/
//! {get_sandbox_target,auth,proxy}.go`; the SDK `daytona` 0.226.1 (`_sync/sandbox.py`,
//! `_sync/snapshot.py`) and its generated models (`SnapshotDto`, `PortPreviewUrl`).
//!
//! The emulated sandboxes are of class `container` (Daytona's default): `pause` and `fork` answer
//! 422 as the service does for that class; a snapshot is the runner's `docker commit` (the
//! container is not paused, `Pause: false`), here a copy of the overlay's upper layer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State as AxState};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode, Uri, header};
use serde::Deserialize;

use super::api::{Addressed, Authorized};
use super::{State, authorized, envelope, json_response};
use execseam_emulator_kit::ports::{self, PortError};

/// The preview proxy's domain: the self-hosted default (`docker/docker-compose.yaml`:
/// `PROXY_DOMAIN=proxy.localhost:4000`, `PROXY_PROTOCOL=http`), on the emulator's own port.
pub const PROXY_DOMAIN: &str = "proxy.localhost";

/// The daemon's own ports, which the proxy always authenticates (`apps/proxy/pkg/proxy/proxy.go`:
/// `TERMINAL_PORT`, `TOOLBOX_PORT`, `RECORDING_DASHBOARD_PORT`).
pub const DAEMON_PORTS: [u16; 3] = [22222, 2280, 33333];

/// The header a preview request carries the sandbox's token in (`SANDBOX_AUTH_KEY_HEADER`).
pub const PREVIEW_TOKEN_HEADER: &str = "x-daytona-preview-token";

/// One snapshot the organization owns.
pub(crate) struct SnapshotEntry {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) source: String,
    pub(crate) created_at: String,
    pub(crate) layer: execseam_emulator_kit::Snapshot,
}

/// The general snapshots every organization can start from (the default image's name).
pub(crate) fn is_general(name: &str) -> bool {
    name.starts_with("daytonaio/sandbox:")
}

fn error(status: StatusCode, message: &str, uri: &Uri, method: &Method) -> Response {
    let code = match status {
        StatusCode::NOT_FOUND => "NOT_FOUND",
        StatusCode::BAD_REQUEST => "BAD_REQUEST",
        StatusCode::UNPROCESSABLE_ENTITY => "UNPROCESSABLE_ENTITY",
        _ => "INTERNAL_SERVER_ERROR",
    };
    envelope(
        status,
        message,
        Some(code),
        "DAYTONA_API",
        uri.path(),
        method.as_str(),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateSandboxSnapshot {
    name: String,
    #[serde(default)]
    include_memory: Option<bool>,
}

/// `POST /sandbox/{id}/snapshot {name, includeMemory?}` (`createSnapshotFromSandbox`): from
/// `started` or `stopped` only; `includeMemory` is for Windows sandboxes only; the sandbox goes
/// `snapshotting` and the answer is that sandbox at once (v0 runners commit in the background,
/// `runV0SnapshotFromSandbox`), then back to its previous state, the snapshot persisted
/// `active`. A name the organization already has is refused up front with the snapshot
/// service's 409 (the service meets it only when the background driver persists the snapshot,
/// a unique violation it logs and drops: refusing is the emulator's choice, documented).
pub(super) async fn snapshot(a: Addressed, body: Bytes) -> Response {
    let req: CreateSandboxSnapshot = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return a.error(StatusCode::BAD_REQUEST, &format!("invalid body: {e}"));
        }
    };
    let previous = {
        let life = a.s.life.lock().expect("life");
        if !matches!(life.state, "started" | "stopped") {
            drop(life);
            return a.error(
                StatusCode::BAD_REQUEST,
                "Sandbox must be in started or stopped state to create a snapshot",
            );
        }
        life.state
    };
    if req.include_memory == Some(true) {
        return a.error(
            StatusCode::BAD_REQUEST,
            "includeMemory is only supported for Windows sandboxes",
        );
    }
    if req.name.trim().is_empty()
        || a.state
            .snapshots
            .lock()
            .expect("snapshots")
            .iter()
            .any(|x| x.name == req.name)
        || is_general(&req.name)
    {
        return a.error(
            StatusCode::CONFLICT,
            &format!(
                "Snapshot with name \"{}\" already exists for this organization",
                req.name
            ),
        );
    }
    {
        let mut life = a.s.life.lock().expect("life");
        life.state = "snapshotting";
        life.touch();
    }
    let answer = json_response(StatusCode::OK, &a.dto(None));
    let (st, s) = (a.state.clone(), a.s.clone());
    tokio::spawn(async move {
        let sandbox = s.sandbox.clone();
        let layer = tokio::task::spawn_blocking(move || sandbox.snapshot()).await;
        if let Ok(Ok(layer)) = layer {
            st.snapshots
                .lock()
                .expect("snapshots")
                .push(Arc::new(SnapshotEntry {
                    id: super::uuid_v4(),
                    name: req.name,
                    source: s.id.clone(),
                    created_at: super::files::rfc3339(std::time::SystemTime::now()),
                    layer,
                }));
        } else {
            tracing::debug!(sandbox = %s.id, "snapshot failed");
        }
        // "Always clear SNAPSHOTTING": back to the previous state either way.
        let mut life = s.life.lock().expect("life");
        if life.state == "snapshotting" {
            life.state = previous;
            life.touch();
        }
    });
    answer
}

/// `SnapshotDto` (every field the SDK's model requires).
fn snapshot_dto(s: &SnapshotEntry) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "organizationId": super::ORG,
        "general": false,
        "name": s.name,
        "imageName": null,
        "state": "active",
        "size": (s.layer.size_bytes() as f64) / 1e9,
        "entrypoint": null,
        "cpu": 1,
        "gpu": 0,
        "mem": 1,
        "disk": 3,
        "errorReason": null,
        "createdAt": s.created_at,
        "updatedAt": s.created_at,
        "lastUsedAt": null,
        "ref": format!("registry.local/execseam/{}", s.id),
        "sourceSandboxId": s.source,
        "sandboxClass": "container",
    })
}

/// `GET /snapshots?page=&limit=&name=&sourceSandboxId=` (`getAllSnapshots`: page 1, limit 10
/// by default, `name` a case-insensitive substring) → `PaginatedSnapshots`.
pub(super) async fn list_snapshots(Authorized { state, uri, .. }: Authorized) -> Response {
    let q = super::api::query_pairs(&uri);
    let get = |k: &str| q.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let page = get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let limit = get("limit")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(10)
        .max(1);
    let name = get("name").map(|n| n.to_lowercase());
    let source = get("sourceSandboxId");
    let all: Vec<serde_json::Value> = state
        .snapshots
        .lock()
        .expect("snapshots")
        .iter()
        .filter(|s| {
            name.as_ref()
                .is_none_or(|n| s.name.to_lowercase().contains(n))
        })
        .filter(|s| source.as_ref().is_none_or(|src| *src == s.source))
        .map(|s| snapshot_dto(s))
        .collect();
    super::api::paginated(all, page, limit, 0)
}

impl State {
    /// The organization's snapshot with this id or name.
    pub(crate) fn snapshot(&self, id_or_name: &str) -> Option<Arc<SnapshotEntry>> {
        let all = self.snapshots.lock().expect("snapshots");
        all.iter()
            .find(|s| s.id == id_or_name)
            .or_else(|| all.iter().find(|s| s.name == id_or_name))
            .cloned()
    }
}

/// `GET /snapshots/{idOrName}` (`getSnapshot`).
pub(super) async fn get_snapshot(a: Authorized, Path(id): Path<String>) -> Response {
    match a.state.snapshot(&id) {
        Some(s) => json_response(StatusCode::OK, &snapshot_dto(&s)),
        None => a.error(
            StatusCode::NOT_FOUND,
            &format!("Snapshot with ID or name {id} not found"),
        ),
    }
}

/// `DELETE /snapshots/{id}` (`removeSnapshot`: the id only, `ParseUUIDPipe`; 404 when unknown;
/// 200 with no body). The service marks it `removing` and a job removes it; here it is gone at
/// once (its layer stays while a sandbox created from it runs).
pub(super) async fn delete_snapshot(a: Authorized, Path(id): Path<String>) -> Response {
    if !is_uuid(&id) {
        return a.error(
            StatusCode::BAD_REQUEST,
            "Validation failed (uuid is expected)",
        );
    }
    let mut all = a.state.snapshots.lock().expect("snapshots");
    let Some(at) = all.iter().position(|s| s.id == id) else {
        drop(all);
        return a.error(StatusCode::NOT_FOUND, &format!("Snapshot {id} not found"));
    };
    all.remove(at);
    StatusCode::OK.into_response()
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && parts
            .iter()
            .all(|p| p.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl Addressed {
    /// An error in the API's envelope, for this request ([`error`]).
    fn error(&self, status: StatusCode, message: &str) -> Response {
        error(status, message, &self.uri, &self.method)
    }
}

impl Authorized {
    /// An error in the API's envelope, for this request ([`error`]).
    fn error(&self, status: StatusCode, message: &str) -> Response {
        error(status, message, &self.uri, &self.method)
    }
}

/// `POST /sandbox/{id}/pause`: only `linux-vm` and `windows` sandboxes pause (`pause`: "Sandbox
/// must be in started state to pause", then 422 for any other class); the emulated ones are
/// containers.
pub(super) async fn pause(a: Addressed) -> Response {
    if a.s.life.lock().expect("life").state != "started" {
        return a.error(
            StatusCode::BAD_REQUEST,
            "Sandbox must be in started state to pause",
        );
    }
    a.error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Pausing is not supported for this sandbox",
    )
}

/// `POST /sandbox/{id}/fork`: the class is checked first (`forkSandbox`), so a container
/// sandbox's fork is 422 whatever its state.
pub(super) async fn fork(a: Addressed) -> Response {
    a.error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Forking is not supported for this sandbox",
    )
}

/// `GET /sandbox/{id}/ports/{port}/preview-url` (`getPortPreviewUrl`): port 1–65535 ("Invalid
/// port", 400), `{sandboxId, url: "{proxyProtocol}://{port}-{id}.{proxyDomain}", token:
/// sandbox.authToken}`; here the self-hosted shape on the emulator's port.
pub(super) async fn preview_url(a: Addressed, Path((_, port)): Path<(String, String)>) -> Response {
    let port = match preview_port(&port, &a.uri, &a.method) {
        Ok(p) => p,
        Err(r) => return r,
    };
    json_response(
        StatusCode::OK,
        &serde_json::json!({
            "sandboxId": a.s.id,
            "url": format!("http://{port}-{}.{PROXY_DOMAIN}:{}", a.s.id, a.state.listen_port()),
            "token": a.s.auth_token,
        }),
    )
}

/// Signed preview tokens: `(port, token)` → the sandbox id and when the token stops working
/// (the API keeps `sandbox:signed-preview-url-token:{port}:{token}` in Redis with `SETEX`).
pub(crate) type SignedTokens = Mutex<HashMap<(u16, String), (String, std::time::Instant)>>;

/// The path's port as `getSignedPortPreviewUrl` checks it (1–65535, "Invalid port").
fn preview_port(port: &str, uri: &Uri, method: &Method) -> Result<u16, Response> {
    match port.parse::<i64>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        Ok(_) => Err(error(StatusCode::BAD_REQUEST, "Invalid port", uri, method)),
        Err(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "Validation failed (numeric string is expected)",
            uri,
            method,
        )),
    }
}

/// `GET /sandbox/{id}/ports/{port}/signed-preview-url?expiresInSeconds=` (`getSignedPortPreviewUrl`,
/// `sandbox.service.ts` at v0.190.0): port 1–65535, `expiresInSeconds` 1 s–24 h (default 60,
/// else 400 "expiresInSeconds must be between 1 second and 24 hours"; a value that is not a
/// number is the same 400 here: inferred), a token of 16 `[a-z0-9]` (nanoid without `_-`,
/// lowercased) kept for that long, and `{sandboxId, port, token, url:
/// "{proxyProtocol}://{port}-{token}.{proxyDomain}"}`: the token is the URL's host label, so
/// the URL works with no header.
pub(super) async fn signed_preview_url(
    a: Addressed,
    Path((_, port)): Path<(String, String)>,
) -> Response {
    let (state, s, uri, method) = (a.state, a.s, a.uri, a.method);
    let port = match preview_port(&port, &uri, &method) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let expires = super::api::query_pairs(&uri)
        .into_iter()
        .find(|(k, _)| k == "expiresInSeconds")
        .map_or(Some(60), |(_, v)| v.parse::<u64>().ok())
        .filter(|e| (1..=86_400).contains(e));
    let Some(expires) = expires else {
        return error(
            StatusCode::BAD_REQUEST,
            "expiresInSeconds must be between 1 second and 24 hours",
            &uri,
            &method,
        );
    };
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let hex = super::uuid_v4().replace('-', "");
    let token: String = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let v = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("0"), 16).unwrap_or(0);
            ALPHABET[usize::from(v) % ALPHABET.len()] as char
        })
        .collect();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(expires);
    state
        .signed
        .lock()
        .expect("signed")
        .insert((port, token.clone()), (s.id.clone(), until));
    json_response(
        StatusCode::OK,
        &serde_json::json!({
            "sandboxId": s.id,
            "port": port,
            "token": token,
            "url": format!("http://{port}-{token}.{PROXY_DOMAIN}:{}", state.listen_port()),
        }),
    )
}

/// `POST /sandbox/{id}/ports/{port}/signed-preview-url/{token}/expire`
/// (`expireSignedPortPreviewUrl`): the token stops working at once (`redis.del`); an unknown
/// token is no error. Nest answers a `@Post` without `@HttpCode` with 201 and no body.
pub(super) async fn expire_signed_preview_url(
    a: Addressed,
    Path((_, port, token)): Path<(String, String, String)>,
) -> Response {
    let port = match preview_port(&port, &a.uri, &a.method) {
        Ok(p) => p,
        Err(r) => return r,
    };
    a.state
        .signed
        .lock()
        .expect("signed")
        .remove(&(port, token));
    StatusCode::CREATED.into_response()
}

impl State {
    /// The sandbox a live signed token names for `port` (`getSandboxIdFromSignedPreviewUrlToken`);
    /// an expired one is forgotten.
    fn signed_sandbox(&self, port: u16, token: &str) -> Option<String> {
        let mut signed = self.signed.lock().expect("signed");
        let key = (port, token.to_owned());
        match signed.get(&key) {
            Some((id, until)) if *until > std::time::Instant::now() => Some(id.clone()),
            Some(_) => {
                signed.remove(&key);
                None
            }
            None => None,
        }
    }
}

impl State {
    /// The port the emulator listens on (its preview URLs name it).
    pub(crate) fn listen_port(&self) -> u16 {
        self.shell
            .base_url()
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .unwrap_or(80)
    }
}

/// The preview proxy (`apps/proxy`): a request whose `Host` is `{port}-{id}.proxy.localhost`
/// goes to that port of the sandbox; anything else is the API's. A private sandbox needs the
/// API key as a bearer token, or its token in `X-Daytona-Preview-Token` (or the
/// `DAYTONA_SANDBOX_AUTH_KEY` query parameter); without either the proxy redirects (307) to
/// its sign-in page (`Authenticate`). The credential is not forwarded to the sandbox.
pub(super) async fn preview_proxy(
    AxState(state): AxState<Arc<State>>,
    mut req: Request,
    next: Next,
) -> Response {
    let target = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| ports::port_host(h, PROXY_DOMAIN))
        .map(|(p, id)| (p, id.to_owned()));
    let Some((port, id)) = target else {
        return next.run(req).await;
    };
    let method = req.method().clone();
    let uri = req.uri().clone();
    let proxy_error = |status: StatusCode, message: &str| {
        envelope(
            status,
            message,
            None,
            "DAYTONA_PROXY",
            uri.path(),
            method.as_str(),
        )
    };
    // A host label that is no sandbox may be a signed token (`auth.go`: tried after the
    // sandbox's own credentials): a live one for this port is the sandbox's credential.
    let signed = match state.sandbox(&id) {
        Some(_) => None,
        None => state.signed_sandbox(port, &id),
    };
    let Some(s) = state.sandbox(signed.as_deref().unwrap_or(&id)) else {
        if signed_shaped(&id) {
            // `Authenticate` found no credential: the redirect to sign in.
            return (
                StatusCode::TEMPORARY_REDIRECT,
                [(
                    header::LOCATION,
                    format!("{}/auth/preview/{id}", state.shell.base_url()),
                )],
            )
                .into_response();
        }
        return proxy_error(
            StatusCode::BAD_REQUEST,
            &format!("failed to get sandbox public status: sandbox {id} not found"),
        );
    };
    let bearer_ok = signed.is_some() || authorized(&state, req.headers());
    let token_ok = req
        .headers()
        .get(PREVIEW_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t == s.auth_token);
    let query_ok = super::api::query_pairs(&uri)
        .iter()
        .any(|(k, v)| k == "DAYTONA_SANDBOX_AUTH_KEY" && *v == s.auth_token);
    if !(bearer_ok || token_ok || query_ok) {
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(
                header::LOCATION,
                format!("{}/auth/preview/{}", state.shell.base_url(), s.id),
            )],
        )
            .into_response();
    }
    req.headers_mut().remove(header::AUTHORIZATION);
    req.headers_mut().remove(PREVIEW_TOKEN_HEADER);
    if let Err(r) = super::reach_runner(&s, uri.path(), method.as_str()) {
        return r;
    }
    let (parts, body) = req.into_parts();
    let req = http::Request::from_parts(parts, Body::new(body));
    match ports::forward(&s.sandbox, port, req).await {
        Ok(r) => r.into_response(),
        Err(PortError::Paused) => proxy_error(StatusCode::BAD_GATEWAY, "the sandbox is paused"),
        Err(e) => proxy_error(StatusCode::BAD_GATEWAY, &format!("proxy error: {e}")),
    }
}

/// 16 of `[a-z0-9]`: what a signed token looks like (a sandbox id is a UUID).
fn signed_shaped(label: &str) -> bool {
    label.len() == 16
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// The snapshot a create names, if it is one of the organization's: `Ok(None)` for the default
/// (or a general) snapshot, the 400 create answers for an unknown one (`sandbox.service.ts`
/// create: "Snapshot … not found. Did you add it through the Daytona Dashboard?").
pub(crate) fn create_source(
    state: &State,
    name: Option<&str>,
) -> Result<Option<Arc<SnapshotEntry>>, String> {
    match name.map(str::trim) {
        None | Some("") => Ok(None),
        Some(n) if is_general(n) => Ok(None),
        Some(n) => state.snapshot(n).map(Some).ok_or_else(|| {
            format!("Snapshot {n} not found. Did you add it through the Daytona Dashboard?")
        }),
    }
}

/// The organization's snapshots, oldest first.
pub(crate) type Snapshots = Mutex<Vec<Arc<SnapshotEntry>>>;
