//! Dispatch in the bridge's order (id check, auth, pool resolution, route), and every route but
//! exec.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State as AxState;
use axum::http::{HeaderMap, Method, Request, Response, Uri, header};
use execseam_core::{Command, Exec};

use super::wire::{
    base32, decode_uri, decode_uri_component, empty, error_json, json, resolve_workspace_path,
    text, valid_sandbox_id, valid_session_id,
};
use super::{Entry, OPENAPI, State, WORKSPACE};

/// The largest body the bridge's file write and hydrate accept.
pub(crate) const MAX_BODY: usize = 32 * 1024 * 1024;

const PREFIX: &str = "/v1";

fn bearer_ci(headers: &HeaderMap) -> String {
    let h = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if h.len() >= 7 && h[..7].eq_ignore_ascii_case("bearer ") {
        h[7..].to_owned()
    } else {
        String::new()
    }
}

fn bearer_exact(headers: &HeaderMap) -> String {
    execseam_emulator_kit::bearer(headers)
        .unwrap_or("")
        .to_owned()
}

impl State {
    /// The bridge compares with `SANDBOX_API_KEY`; without a configured token the emulator
    /// accepts any non-empty one.
    pub(crate) fn accepts(&self, provided: &str) -> bool {
        self.shell.token().accepts(provided)
    }
}

fn unauthorized() -> Response<Body> {
    error_json("Unauthorized", "unauthorized", 401)
}

fn hono_not_found() -> Response<Body> {
    text("404 Not Found", 404)
}

/// The `Session-Id` header, validated the bridge's way (absent or empty: sessionless).
pub(crate) fn session_header(headers: &HeaderMap) -> Result<Option<String>, Response<Body>> {
    let Some(raw) = headers.get("session-id") else {
        return Ok(None);
    };
    let raw = raw.to_str().unwrap_or("\u{0}");
    if raw.is_empty() {
        return Ok(None);
    }
    if !valid_session_id(raw) {
        return Err(error_json(
            "Invalid session ID format",
            "invalid_request",
            400,
        ));
    }
    Ok(Some(raw.to_owned()))
}

pub(crate) fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| decode_uri_component(&v.replace('+', " ")))
    })
}

/// The fallback handler: the whole bridge.
pub(crate) async fn handle(
    AxState(state): AxState<Arc<State>>,
    req: Request<Body>,
) -> Response<Body> {
    let req = match super::tunnel::proxy(&state, req).await {
        Ok(r) => return r,
        Err(req) => req,
    };
    let path = req.uri().path().to_owned();
    if path == "/health" {
        return if req.method() == Method::GET {
            json(&serde_json::json!({ "ok": true }), 200)
        } else {
            hono_not_found()
        };
    }
    if !(path == PREFIX || path.starts_with("/v1/")) {
        return text("Not Found", 404);
    }
    let rest = &path[PREFIX.len()..];
    if rest == "/sandbox" || rest.starts_with("/sandbox/") {
        return sandbox_routes(state, req).await;
    }
    if let Some(pool) = rest.strip_prefix("/pool/") {
        if !state.accepts(&bearer_exact(req.headers())) {
            return unauthorized();
        }
        let n = state.shell.sandboxes().lock().len();
        return match (req.method().clone(), pool) {
            (Method::GET, "stats") => json(
                &serde_json::json!({
                    "warm": 0, "assigned": n, "total": n,
                    "config": {"warmTarget": 0, "refreshInterval": 10000, "maxInstances": 0, "scaleBatchSize": 5},
                    "maxInstances": null
                }),
                200,
            ),
            (Method::POST, "shutdown-prewarmed" | "prime") => {
                json(&serde_json::json!({ "ok": true }), 200)
            }
            _ => hono_not_found(),
        };
    }
    if matches!(rest, "/openapi.json" | "/openapi.html" | "/openapi") {
        if req.method() != Method::GET {
            return hono_not_found();
        }
        let token = query_param(req.uri(), "token").unwrap_or_default();
        if !state.accepts(&bearer_exact(req.headers())) && !state.accepts_query(&token) {
            return unauthorized();
        }
        if rest == "/openapi.json" {
            let mut r = Response::new(Body::from(OPENAPI));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                "application/json".parse().expect("static"),
            );
            return r;
        }
        let mut r = Response::new(Body::from(
            "<!doctype html><html><head><title>Cloudflare Sandbox Service API</title></head><body><p>The OpenAPI document is at <code>/v1/openapi.json</code>.</p></body></html>",
        ));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            "text/html; charset=utf-8".parse().expect("static"),
        );
        return r;
    }
    hono_not_found()
}

impl State {
    fn accepts_query(&self, token: &str) -> bool {
        !token.is_empty() && self.accepts(token)
    }
}

async fn sandbox_routes(state: Arc<State>, req: Request<Body>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    // "/v1/sandbox/<id>/<rest…>"
    let mut segs = path.splitn(5, '/').skip(3);
    let id = segs.next().unwrap_or("").to_owned();
    let sub = segs.next().map(|s| s.to_owned());
    if !id.is_empty() && !valid_sandbox_id(&id) {
        return error_json("Invalid sandbox ID format", "invalid_request", 400);
    }
    if !state.accepts(&bearer_ci(req.headers())) {
        return unauthorized();
    }
    let method = req.method().clone();
    if id.is_empty() {
        return if method == Method::POST && path == "/v1/sandbox" {
            let mut bytes = [0u8; 16];
            fill_random(&mut bytes);
            json(&serde_json::json!({ "id": base32(&bytes) }), 200)
        } else {
            hono_not_found()
        };
    }
    let Some(sub) = sub else {
        // `/v1/sandbox/{id}`: only DELETE (lookup, never allocate; 204 either way).
        return if method == Method::DELETE {
            state.destroy(&id);
            empty(204)
        } else {
            hono_not_found()
        };
    };
    let (route, tail) = match sub.split_once('/') {
        Some((r, t)) => (r.to_owned(), Some(t.to_owned())),
        None => (sub.clone(), None),
    };
    let known = matches!(
        (&method, route.as_str(), tail.is_some()),
        (&Method::POST, "exec", false)
            | (&Method::GET | &Method::PUT, "file", true)
            | (&Method::POST | &Method::DELETE, "tunnel", true)
            | (&Method::GET, "running", false)
            | (&Method::GET, "pty", false)
            | (
                &Method::POST,
                "persist" | "hydrate" | "mount" | "unmount" | "session",
                false
            )
            | (&Method::DELETE, "session", true)
    );
    // The pool middleware runs for every sub-route, matched or not: it assigns a container.
    let entry = match state.get_or_create(&id) {
        Ok(e) => e,
        Err(e) => return error_json(&format!("pool error: {e}"), "pool_error", 502),
    };
    if !known {
        return hono_not_found();
    }
    match route.as_str() {
        "exec" => super::exec::exec(state, entry, req).await,
        "file" => {
            let tail = tail.unwrap_or_default();
            file(entry, req, &tail).await
        }
        "tunnel" => match tail.as_deref().filter(|p| valid_port(p)) {
            Some(p) => super::tunnel::route(&state, entry, req, p.parse().expect("checked")).await,
            None => error_json("Invalid port", "invalid_request", 400),
        },
        "running" => {
            let ok = entry
                .sandbox
                .exec()
                .exec(Command::new(["true"]).expect("valid"))
                .await
                .is_ok_and(|o| o.exit.success());
            json(&serde_json::json!({ "running": ok }), 200)
        }
        "pty" => super::pty::route(entry, &id, req).await,
        "persist" => persist(entry, req).await,
        "hydrate" => hydrate(entry, req).await,
        "mount" => mount(req).await,
        "unmount" => unmount(req).await,
        "session" => match tail {
            None => session_create(entry, req).await,
            Some(sid) => session_delete(entry, &decode_uri(&sid)).await,
        },
        _ => hono_not_found(),
    }
}

pub(crate) fn fill_random(buf: &mut [u8]) {
    use std::hash::{BuildHasher, Hasher};
    for chunk in buf.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

pub(crate) async fn read_body(req: Request<Body>, limit: usize) -> Result<bytes::Bytes, ()> {
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| ())
}

async fn file(entry: Arc<Entry>, req: Request<Body>, tail: &str) -> Response<Body> {
    let relative = decode_uri(tail);
    if relative.is_empty() {
        return error_json("file path must not be empty", "invalid_request", 400);
    }
    let Some(resolved) = resolve_workspace_path(&format!("/{relative}")) else {
        return error_json(
            "path must resolve to a location within /workspace",
            "invalid_request",
            403,
        );
    };
    if let Err(r) = session_header(req.headers()) {
        return r;
    }
    if req.method() == Method::GET {
        let r = resolved.clone();
        let read = entry
            .sandbox
            .fs(move |fs| {
                let host = fs.path(&r);
                Ok(match std::fs::metadata(&host) {
                    Err(e) => Err(e),
                    Ok(m) if m.is_dir() => Ok(None),
                    Ok(_) => Ok(Some(std::fs::read(&host))),
                })
            })
            .await
            .unwrap_or_else(Err);
        return match read {
            Err(_) => error_json(
                &format!("File not found: {resolved}"),
                "workspace_read_not_found",
                404,
            ),
            Ok(None) => error_json(
                &format!(
                    "read failed: EISDIR: illegal operation on a directory, read '{resolved}'"
                ),
                "exec_transport_error",
                502,
            ),
            Ok(Some(data)) => match data {
                Ok(data) => {
                    let mut r = Response::new(Body::from(data));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        "application/octet-stream".parse().expect("static"),
                    );
                    r
                }
                Err(e) => error_json(&format!("read failed: {e}"), "exec_transport_error", 502),
            },
        };
    }
    // PUT
    let body = match read_body(req, MAX_BODY + 1).await {
        Ok(b) => b,
        Err(()) => {
            return error_json(
                &format!(
                    "payload too large: more than {MAX_BODY} bytes exceeds the {MAX_BODY}-byte limit"
                ),
                "payload_too_large",
                413,
            );
        }
    };
    if body.len() > MAX_BODY {
        return error_json(
            &format!(
                "payload too large: {} bytes exceeds the {MAX_BODY}-byte limit",
                body.len()
            ),
            "payload_too_large",
            413,
        );
    }
    let r = resolved.clone();
    let write = entry.sandbox.fs(move |fs| {
        let host = fs.path(&r);
        if let Some(parent) = host.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&host, &body)
    });
    match write.await {
        Ok(()) => json(&serde_json::json!({ "ok": true }), 200),
        Err(e) => error_json(
            &format!("write failed: {e}"),
            "workspace_archive_write_error",
            502,
        ),
    }
}

fn valid_port(p: &str) -> bool {
    // The SDK's validatePort: an integer in 1024..=65535, and not 3000 (the control port).
    p.parse::<u32>()
        .is_ok_and(|n| (1024..=65535).contains(&n) && n != 3000)
        && !p.starts_with('+')
}

async fn persist(entry: Arc<Entry>, req: Request<Body>) -> Response<Body> {
    let excludes: Vec<String> = query_param(req.uri(), "excludes")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if excludes.iter().any(|e| e.contains("..")) {
        return error_json(
            "exclude paths must not contain \"..\"",
            "invalid_request",
            400,
        );
    }
    let mut argv = vec!["tar".to_owned(), "cf".into(), "-".into()];
    for e in &excludes {
        argv.push("--exclude".into());
        argv.push(format!("./{}", e.trim_start_matches("./")));
    }
    argv.extend([
        "-C".into(),
        entry.sandbox.visible_path(WORKSPACE),
        ".".into(),
    ]);
    match entry
        .sandbox
        .exec()
        .exec(Command::new(argv).expect("valid"))
        .await
    {
        Ok(o) if o.exit.success() => {
            let mut r = Response::new(Body::from(o.stdout));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                "application/octet-stream".parse().expect("static"),
            );
            r
        }
        Ok(o) => error_json(
            &format!(
                "tar failed (exit {}): {}",
                o.exit.shell_status(),
                String::from_utf8_lossy(&o.stderr)
            ),
            "workspace_archive_read_error",
            502,
        ),
        Err(e) => error_json(
            &format!("persist failed: {e}"),
            "workspace_archive_read_error",
            502,
        ),
    }
}

async fn hydrate(entry: Arc<Entry>, req: Request<Body>) -> Response<Body> {
    let Ok(body) = read_body(req, MAX_BODY + 1).await else {
        return error_json("Could not read request body", "invalid_request", 400);
    };
    if body.is_empty() {
        return error_json("Empty tar payload", "invalid_request", 400);
    }
    if body.len() > MAX_BODY {
        return error_json(
            &format!(
                "tar payload too large: {} bytes exceeds the {MAX_BODY}-byte limit",
                body.len()
            ),
            "invalid_request",
            400,
        );
    }
    let name = format!(
        "/tmp/sandbox-hydrate-{}.tar",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    );
    let n = name.clone();
    let written = entry
        .sandbox
        .fs(move |fs| std::fs::write(fs.path(&n), &body))
        .await;
    if let Err(e) = written {
        return error_json(
            &format!("hydrate failed: {e}"),
            "workspace_archive_write_error",
            502,
        );
    }
    let tmp = entry.sandbox.visible_path(&name);
    let ws = entry.sandbox.visible_path(WORKSPACE);
    let script = format!(
        "mkdir -p {ws} && tar xf {tmp} -C {ws}; s=$?; rm -f {tmp}; exit $s",
        ws = execseam_emulator_kit::sh::quote(&ws),
        tmp = execseam_emulator_kit::sh::quote(&tmp)
    );
    match entry
        .sandbox
        .exec()
        .exec(Command::new(["sh", "-c", &script]).expect("valid"))
        .await
    {
        Ok(o) if o.exit.success() => json(&serde_json::json!({ "ok": true }), 200),
        Ok(o) => error_json(
            &format!(
                "tar extract failed (exit {}): {}",
                o.exit.shell_status(),
                String::from_utf8_lossy(&o.stderr)
            ),
            "workspace_archive_write_error",
            502,
        ),
        Err(e) => error_json(
            &format!("hydrate failed: {e}"),
            "workspace_archive_write_error",
            502,
        ),
    }
}

async fn json_body(req: Request<Body>) -> Result<serde_json::Value, Response<Body>> {
    let raw = read_body(req, MAX_BODY)
        .await
        .map_err(|()| error_json("Invalid JSON body", "invalid_request", 400))?;
    serde_json::from_slice(&raw)
        .map_err(|_| error_json("Invalid JSON body", "invalid_request", 400))
}

fn bad(msg: &str) -> Response<Body> {
    error_json(msg, "invalid_request", 400)
}

async fn mount(req: Request<Body>) -> Response<Body> {
    let body = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(o) = body.as_object() else {
        return text("Internal Server Error", 500);
    };
    if let Some(b) = o.get("bucket")
        && b.as_str().is_none_or(str::is_empty)
    {
        return bad("bucket must be a non-empty string");
    }
    let Some(mp) = o
        .get("mountPath")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
    else {
        return bad("mountPath must be a non-empty string");
    };
    if !mp.starts_with('/') {
        return bad("mountPath must be an absolute path (start with /)");
    }
    let Some(opts) = o.get("options").and_then(|v| v.as_object()) else {
        return bad("options must be an object");
    };
    let binding = o.get("binding");
    if opts.contains_key("endpoint") && !opts["endpoint"].is_string() {
        return bad("options.endpoint must be a string when provided");
    }
    if let Some(b) = binding {
        match b.as_str() {
            None => return bad("binding must be a string when provided"),
            Some("") => return bad("binding must be a non-empty string when provided"),
            Some(_) if opts.get("endpoint").is_some_and(|e| !e.is_null()) => {
                return bad("Provide either binding or options.endpoint, not both");
            }
            Some(_) => {}
        }
    }
    if opts.get("s3fsOptions").is_some_and(|v| {
        !v.as_array()
            .is_some_and(|a| a.iter().all(|x| x.is_string()))
    }) {
        return bad("options.s3fsOptions must be an array of strings when provided");
    }
    if opts.get("readOnly").is_some_and(|v| !v.is_boolean()) {
        return bad("options.readOnly must be a boolean when provided");
    }
    if opts.get("prefix").is_some_and(|v| !v.is_string()) {
        return bad("options.prefix must be a string when provided");
    }
    if opts
        .get("credentialProxy")
        .is_some_and(|v| !v.is_null() && !v.is_boolean())
    {
        return bad("options.credentialProxy must be a boolean when provided");
    }
    if let Some(c) = opts.get("credentials")
        && !c.is_null()
        && !(c.get("accessKeyId").is_some_and(|v| v.is_string())
            && c.get("secretAccessKey").is_some_and(|v| v.is_string()))
    {
        return bad("options.credentials must include string accessKeyId and secretAccessKey");
    }
    if opts.get("endpoint").is_some_and(|e| e.is_string()) {
        if o.get("bucket")
            .and_then(|b| b.as_str())
            .is_none_or(str::is_empty)
        {
            return bad("bucket must be a non-empty string for remote mounts");
        }
    } else if binding.is_none() {
        return bad("binding must be a non-empty string for R2 binding mounts");
    }
    error_json(
        "mount failed: s3fs is not available in the emulator",
        "mount_error",
        502,
    )
}

async fn unmount(req: Request<Body>) -> Response<Body> {
    let body = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(o) = body.as_object() else {
        return text("Internal Server Error", 500);
    };
    let Some(mp) = o
        .get("mountPath")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
    else {
        return bad("mountPath must be a non-empty string");
    };
    if !mp.starts_with('/') {
        return bad("mountPath must be an absolute path (start with /)");
    }
    if execseam_emulator_kit::util::clean_path(mp) == "/" {
        return bad("mountPath must not resolve to / (filesystem root)");
    }
    error_json(
        "unmount failed: No active mount found",
        "unmount_error",
        502,
    )
}

async fn session_create(entry: Arc<Entry>, req: Request<Body>) -> Response<Body> {
    // The bridge ignores a body that is not JSON.
    let raw = read_body(req, MAX_BODY).await.unwrap_or_default();
    let body: serde_json::Value = serde_json::from_slice(&raw).unwrap_or(serde_json::json!({}));
    let id = body
        .get("id")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            // The SDK's `createSession`: `options?.id || \`session-${Date.now()}\``
            // (@cloudflare/sandbox 0.12.10 `dist/sandbox-*.js`).
            format!(
                "session-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or_default()
            )
        });
    if entry.sessions.lock().expect("sessions").contains_key(&id) {
        return error_json(
            &format!("session create failed: Session '{id}' already exists"),
            "session_error",
            502,
        );
    }
    let cwd = body.get("cwd").and_then(|v| v.as_str()).map(str::to_owned);
    let env: Vec<(String, String)> = body
        .get("env")
        .and_then(|v| v.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    match super::exec::new_session(&entry, &id, cwd.as_deref(), &env).await {
        Ok(()) => json(&serde_json::json!({ "id": id }), 200),
        Err(e) => error_json(&format!("session create failed: {e}"), "session_error", 502),
    }
}

async fn session_delete(entry: Arc<Entry>, sid: &str) -> Response<Body> {
    if sid.is_empty() {
        return error_json("session ID must not be empty", "invalid_request", 400);
    }
    if sid == "sandbox-default" {
        return error_json(
            "session delete failed: cannot delete the default session",
            "session_error",
            502,
        );
    }
    let removed = entry.sessions.lock().expect("sessions").remove(sid);
    // A terminal's session exists from its `getPty` on (`getOrCreateSession`), named or not.
    let had_terminal = entry.terminals.destroy(sid).await;
    match removed {
        None if had_terminal => deleted(sid),
        Some(s) => {
            let dir = s.dir.clone();
            let _ = entry
                .sandbox
                .fs_blocking(move |fs| std::fs::remove_dir_all(fs.path(&dir)));
            deleted(sid)
        }
        None => error_json(
            &format!("session delete failed: Session '{sid}' not found"),
            "session_error",
            502,
        ),
    }
}

/// The container's answer to a session deleted.
fn deleted(sid: &str) -> Response<Body> {
    // The container's key order: success, sessionId, timestamp.
    let body = format!(
        "{{\"success\":true,\"sessionId\":{},\"timestamp\":{}}}",
        serde_json::Value::from(sid),
        serde_json::Value::from(super::exec::timestamp())
    );
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("static"),
    );
    r
}
