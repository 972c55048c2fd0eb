//! The routes: Chrono's `/execute`, `/execute/stream` and `/executions*` (bodies, codes and
//! headers from [`execseam_chrono_contract::wire`], replies from [`execseam_chrono_contract::contract`]), plus
//! `/healthz` and `/metrics`.

// A handler's early answer is a `Response` (axum's idiom); it is built once per request.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use execseam_chrono_contract::contract::{self, Record, Reply, error_reply};
use execseam_chrono_contract::wire::{self, ExecuteRequest, codes};
use futures_util::StreamExt as _;
use secrecy::SecretString;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::node::Node;
use crate::runner::{Chunk, RunEnd};
use crate::store::{StoreError, Stored, Submitted};

type S = State<Arc<Node>>;

/// The router of a replica.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route(wire::path::EXECUTE, post(execute))
        .route(wire::path::EXECUTE_STREAM, post(execute_stream))
        .route(wire::path::EXECUTIONS, post(submit))
        .route("/executions/{id}", get(status))
        .route("/executions/{id}/result", get(result))
        .route("/executions/{id}/cancel", post(cancel))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(|| async { render(error_reply(404, "NOT_FOUND", "no such route", None)) })
        .layer(middleware::from_fn_with_state(node.clone(), count))
        .with_state(node)
}

async fn count(State(n): S, req: Request, next: Next) -> Response {
    let route: &'static str = match req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
    {
        Some("/execute") => "execute",
        Some("/execute/stream") => "execute_stream",
        Some("/executions") => "submit",
        Some("/executions/{id}") => "status",
        Some("/executions/{id}/result") => "result",
        Some("/executions/{id}/cancel") => "cancel",
        Some("/healthz") => "healthz",
        Some("/metrics") => "metrics",
        _ => "other",
    };
    let resp = next.run(req).await;
    n.metrics.request(route, resp.status().as_u16());
    resp
}

/// Renders a contract reply.
pub fn render(r: Reply) -> Response {
    let mut resp = Response::new(Body::from(r.body));
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in r.headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

fn err(status: u16, code: &str, message: &str) -> Response {
    render(error_reply(status, code, message, None))
}

fn store_failed(n: &Node, e: &StoreError) -> Response {
    eprintln!("execseam serve: {e}");
    render(error_reply(
        503,
        "STORE_UNAVAILABLE",
        "the operation store is unavailable",
        Some(n.config.retry_after_secs),
    ))
}

fn busy(n: &Node, message: &str) -> Response {
    render(error_reply(
        429,
        codes::EXECUTION_CAPACITY_EXCEEDED,
        message,
        Some(n.config.retry_after_secs),
    ))
}

/// The owner of the request's bearer token (or `anonymous` without authentication).
fn owner(n: &Node, headers: &HeaderMap) -> Result<String, Response> {
    let Some(tokens) = &n.config.tokens else {
        return Ok("anonymous".into());
    };
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, t) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| t.trim().to_owned())
        })
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Err(err(
            401,
            codes::UNAUTHENTICATED,
            "a bearer token is required",
        ));
    };
    tokens
        .owner(&SecretString::from(token))
        .map(str::to_owned)
        .ok_or_else(|| err(401, codes::UNAUTHENTICATED, "the credential was rejected"))
}

async fn read_body(n: &Node, headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let limit = n.config.max_payload_bytes;
    let too_large = || {
        err(
            413,
            codes::EXECUTION_PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {limit} bytes"),
        )
    };
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|l| l > limit) {
        drain(stream, limit).await;
        return Err(too_large());
    }
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Err(err(
                400,
                codes::INVALID_REQUEST,
                "the body could not be read",
            ));
        };
        if buf.len() + chunk.len() > limit {
            drain(stream, limit).await;
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

/// Reads and drops what the client still sends (up to a bound), so that it reads the 413
/// instead of seeing its connection closed mid-upload.
async fn drain(mut stream: axum::body::BodyDataStream, limit: usize) {
    let bound = limit.saturating_mul(4).max(1 << 20);
    let mut seen = 0usize;
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout(Duration::from_secs(5), stream.next()).await
    {
        seen += chunk.len();
        if seen > bound {
            break;
        }
    }
}

/// Parses and checks a request body. The error text never quotes the body.
fn parse(n: &Node, body: &[u8]) -> Result<ExecuteRequest, Response> {
    let req: ExecuteRequest = serde_json::from_slice(body).map_err(|e| {
        err(
            400,
            codes::INVALID_REQUEST,
            &format!(
                "the body is not an execution request ({:?} error at line {} column {}; \
                 want {{\"language\": python|javascript|typescript|bash, \"script\", \"timeout_secs\"}})",
                e.classify(),
                e.line(),
                e.column()
            ),
        )
    })?;
    if let Some(t) = req.timeout_secs
        && !(wire::MIN_TIMEOUT_SECS..=n.config.max_timeout_secs).contains(&t)
    {
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            &format!(
                "timeout_secs {t} is outside {}..={}",
                wire::MIN_TIMEOUT_SECS,
                n.config.max_timeout_secs
            ),
        ));
    }
    req.check_fields()
        .map_err(|m| err(400, codes::INVALID_REQUEST, &m))?;
    // Paths are relative to the program's working directory (the adapter's), inside it.
    let outside = |p: &str| p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == "..");
    if let Some(f) = req.input_files.iter().find(|f| outside(&f.path)) {
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            &format!(
                "input_files: {:?} is not a path below the working directory",
                f.path
            ),
        ));
    }
    if let Some(p) = req.retrieve_files.iter().find(|p| outside(p)) {
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            &format!("retrieve_files: {p:?} is not a pattern below the working directory"),
        ));
    }
    if req.network_enabled == Some(false) {
        // No adapter's sandbox spec can turn the network off: refused, never ignored.
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            &format!(
                "network_enabled=false cannot be enforced by the {} adapter",
                n.runner.adapter()
            ),
        ));
    }
    Ok(req)
}

fn sync_error(end: RunEnd) -> Response {
    render(end.reply())
}

/// A synchronous execution's admission: an authenticated caller, a body read and parsed, and a
/// free execution slot (held until the run ends).
async fn admit(
    n: &Node,
    headers: &HeaderMap,
    body: Body,
) -> Result<(ExecuteRequest, OwnedSemaphorePermit), Response> {
    owner(n, headers)?;
    let body = read_body(n, headers, body).await?;
    let req = parse(n, &body)?;
    let Ok(permit) = n.slots.clone().try_acquire_owned() else {
        return Err(busy(n, "every execution slot is busy"));
    };
    Ok((req, permit))
}

/// Runs `req` now, outside the store (nothing to cancel it, no detach), its output chunks to
/// `chunks` as they come when set.
async fn run_now(
    n: &Node,
    req: &ExecuteRequest,
    chunks: Option<mpsc::UnboundedSender<Chunk>>,
) -> RunEnd {
    n.runner
        .run(
            req,
            n.timeout(req),
            std::future::pending(),
            |_| std::future::ready(true),
            |_| std::future::ready(()),
            false,
            chunks,
        )
        .await
}

async fn execute(State(n): S, headers: HeaderMap, body: Body) -> Response {
    let (req, _permit) = match admit(&n, &headers, body).await {
        Ok(admitted) => admitted,
        Err(r) => return r,
    };
    sync_error(run_now(&n, &req, None).await)
}

fn sse(v: serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

enum Sse {
    Chunk(Chunk),
    End(RunEnd),
}

/// Aborts the run when the SSE stream is dropped (the client went away).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn execute_stream(State(n): S, headers: HeaderMap, body: Body) -> Response {
    let (req, permit) = match admit(&n, &headers, body).await {
        Ok(admitted) => admitted,
        Err(r) => return r,
    };
    let (tx, rx) = mpsc::unbounded_channel::<Sse>();
    let (ctx, mut crx) = mpsc::unbounded_channel::<Chunk>();
    let node = n.clone();
    let forward = tx.clone();
    let task = tokio::spawn(async move {
        let _permit = permit;
        let pump = tokio::spawn(async move {
            while let Some(c) = crx.recv().await {
                let _ = forward.send(Sse::Chunk(c));
            }
        });
        let end = run_now(&node, &req, Some(ctx)).await;
        let _ = pump.await;
        let _ = tx.send(Sse::End(end));
    });
    let guard = AbortOnDrop(task.abort_handle());
    let stream = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let line = match rx.recv().await? {
            Sse::Chunk(Chunk::Stdout(t)) => sse(serde_json::json!({"type": "stdout", "text": t})),
            Sse::Chunk(Chunk::Stderr(t)) => sse(serde_json::json!({"type": "stderr", "text": t})),
            Sse::End(end) => sse(end.stream_event()),
        };
        Some((Ok::<_, std::io::Error>(line), (rx, guard)))
    });
    let mut resp = Response::new(Body::from_stream(stream.boxed()));
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}

fn base_url(headers: &HeaderMap) -> String {
    headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .filter(|h| h.bytes().all(|b| b.is_ascii_graphic()))
        .map(|h| format!("http://{h}"))
        .unwrap_or_default()
}

async fn submit(State(n): S, headers: HeaderMap, body: Body) -> Response {
    let owner = match owner(&n, &headers) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if !n.config.async_enabled {
        return err(
            503,
            codes::ASYNC_EXECUTION_UNAVAILABLE,
            "asynchronous execution is disabled",
        );
    }
    // The key is checked before the body (seed 004: the empty-body probe got this code).
    let Some(key) = headers.get(wire::IDEMPOTENCY_KEY_HEADER) else {
        return err(
            400,
            codes::IDEMPOTENCY_KEY_MISSING,
            "Idempotency-Key is required",
        );
    };
    // Present but not visible ASCII (`ключ`): there, and invalid; say which rule it breaks.
    let key = match key.to_str() {
        Ok(k) => k.to_owned(),
        Err(_) => String::from_utf8_lossy(key.as_bytes()).into_owned(),
    };
    if let Err(m) = wire::check_idempotency_key(&key) {
        return err(400, codes::INVALID_REQUEST, &m);
    }
    let body = match read_body(&n, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let req = match parse(&n, &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let now = SystemTime::now();
    let fresh = Record::new(
        contract::operation_id(),
        owner,
        &key,
        req.payload_hash(),
        now,
        n.config.retention,
    );
    let request = serde_json::to_string(&req).expect("a request serialises");
    let base = base_url(&headers);
    let retry = n.config.retry_after_secs;
    match n
        .store
        .submit(fresh, &request, n.config.max_operations, now)
        .await
    {
        Ok(Submitted::Created(op)) => {
            n.work.notify_one();
            render(contract::submit_reply(&op.rec, &base, retry))
        }
        Ok(Submitted::Replayed(op)) => render(contract::submit_reply(&op.rec, &base, retry)),
        Ok(Submitted::Conflict) => err(
            409,
            codes::IDEMPOTENCY_KEY_REUSE,
            "the key was used with another payload",
        ),
        Ok(Submitted::Full) => busy(&n, "too many active executions"),
        Err(e) => store_failed(&n, &e),
    }
}

/// The operation, readable by the request's owner, or the 401/404/410 reply.
async fn readable(n: &Node, id: &str, headers: &HeaderMap) -> Result<Stored, Response> {
    let owner = owner(n, headers)?;
    if !wire::valid_operation_id(id) {
        return Err(err(404, codes::OPERATION_NOT_FOUND, "no such operation"));
    }
    let op = n.store.get(id).await.map_err(|e| store_failed(n, &e))?;
    match contract::lookup_failure(op.as_ref().map(|o| &o.rec), &owner, SystemTime::now()) {
        Some(reply) => Err(render(reply)),
        None => Ok(op.expect("readable")),
    }
}

async fn status(State(n): S, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let op = match readable(&n, &id, &headers).await {
        Ok(op) => op,
        Err(r) => return r,
    };
    let inm = headers.get("if-none-match").and_then(|v| v.to_str().ok());
    render(contract::status_reply(
        &op.rec,
        inm,
        n.config.retry_after_secs,
    ))
}

async fn result(State(n): S, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let op = match readable(&n, &id, &headers).await {
        Ok(op) => op,
        Err(r) => return r,
    };
    match (&op.result_json, op.rec.status.is_terminal()) {
        // The stored body, byte for byte.
        (Some(body), true) => render(Reply {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: body.clone().into_bytes(),
        }),
        _ => render(contract::result_reply(&op.rec, n.config.retry_after_secs)),
    }
}

async fn cancel(State(n): S, Path(id): Path<String>, headers: HeaderMap, body: Body) -> Response {
    if let Err(r) = readable(&n, &id, &headers).await {
        return r;
    }
    let body = match read_body(&n, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    // Aevatar sends exactly `{}`; accept any JSON object.
    if !body.is_empty()
        && serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&body).is_err()
    {
        return err(
            400,
            codes::INVALID_REQUEST,
            "the cancel body is not a JSON object",
        );
    }
    let mut rec = match n.request_cancel(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return err(404, codes::OPERATION_NOT_FOUND, "no such operation"),
        Err(e) => return store_failed(&n, &e),
    };
    let deadline = tokio::time::Instant::now() + n.config.cancel_wait;
    while !rec.status.is_terminal() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
        match n.store.get(&id).await {
            Ok(Some(op)) => rec = op.rec,
            Ok(None) => break,
            Err(e) => return store_failed(&n, &e),
        }
    }
    render(contract::cancel_reply(&rec))
}

/// What `/execute` can do now: the store, client connections (a new one is served only below
/// the limit or by closing an idle one) and free command slots (a sync call beyond them is
/// answered 429).
async fn healthz(State(n): S) -> Response {
    let store = n.store.ping().await.is_ok();
    let c = &n.connections;
    let accepting = c.can_accept();
    let status = match (store, accepting) {
        (false, _) => "store_unavailable",
        (true, false) => "connections_exhausted",
        (true, true) => "ok",
    };
    let body = serde_json::json!({
        "status": status,
        "replica": n.config.replica_id,
        "adapter": n.runner.adapter(),
        "store": format!("{:?}", n.store.backend()).to_lowercase(),
        "connections": c.open(),
        "connection_limit": c.limit(),
        "connections_busy": c.busy(),
        "connections_evicted": c.evicted(),
        "connections_refused": c.refused(),
        "running": n.config.max_running - n.slots.available_permits(),
        "max_running": n.config.max_running,
    });
    render(Reply::json(if status == "ok" { 200 } else { 503 }, &body))
}

async fn metrics(State(n): S) -> Response {
    let (ops, up) = match n.store.counts().await {
        Ok(c) => (c, true),
        Err(_) => (Vec::new(), false),
    };
    let mut resp = Response::new(Body::from(n.metrics.render(&ops, up)));
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}
