//! The HTTP routes, fault injection, and the background task that drives each operation.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use execseam_chrono_contract::wire::{self, ExecuteRequest, Phase, Status, codes};
use futures_util::StreamExt as _;
use tokio::sync::{mpsc, watch};

use super::ChronoOptions;
use super::contract::{self, End, Record, Reply, error_reply};
use super::runner::{Chunk, Runner};
use super::store::{MemoryStore, Submitted};
use execseam_chrono_contract::RunEnd;
use execseam_emulator_kit::clock::hex_id;
use execseam_emulator_kit::{ConnControl, Fault, FaultHandle, Shell, reset_connection};

use crate::Chrono;

pub(crate) struct Shared {
    pub(crate) options: ChronoOptions,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) runner: Arc<Runner>,
    pub(crate) faults: FaultHandle,
    pub(crate) shell: Arc<Shell<Chrono>>,
}

type S = State<Arc<Shared>>;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(wire::path::EXECUTE, post(execute))
        .route(wire::path::EXECUTE_STREAM, post(execute_stream))
        .route(wire::path::EXECUTIONS, post(submit))
        .route("/executions/{id}", get(status))
        .route("/executions/{id}/result", get(result))
        .route("/executions/{id}/cancel", post(cancel))
        .fallback(|| async { render(error_reply(404, "NOT_FOUND", "no such route", None)) })
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

/// Renders a contract reply.
pub(crate) fn render(r: Reply) -> Response {
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

/// A 200 whose body stops half-way (the connection is then aborted).
fn cut(status: u16, body: Vec<u8>) -> Response {
    let half = Bytes::from(body[..body.len() / 2].to_vec());
    let stream = futures_util::stream::iter(vec![
        Ok(half),
        Err(std::io::Error::other("cut by fault injection")),
    ]);
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

fn malformed(status: u16) -> Response {
    let mut resp = Response::new(Body::from(r#"{"success": true, "output": {"stdout": "#));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    resp
}

/// Faults that end the request at once, credentials, and the owner. The remaining fault (if any)
/// is the handler's to render after doing its work.
async fn admit(
    s: &Shared,
    route: &str,
    headers: &HeaderMap,
) -> Result<(String, Option<Fault>), Response> {
    let fault = s.faults.take(route);
    if let Some(Fault::Latency(d)) = fault {
        tokio::time::sleep(d).await;
    }
    let retry = s.options.retry_after_secs;
    match fault {
        Some(Fault::AuthFailure) => {
            return Err(err(
                401,
                codes::UNAUTHENTICATED,
                "the credential was rejected",
            ));
        }
        Some(Fault::RateLimited { retry_after_secs }) => {
            return Err(render(error_reply(
                429,
                codes::EXECUTION_CAPACITY_EXCEEDED,
                "too many executions",
                Some(retry_after_secs),
            )));
        }
        Some(Fault::Unavailable) => {
            return Err(render(error_reply(
                503,
                codes::SANDBOX_UNREACHABLE,
                "the sandbox service is unavailable",
                Some(retry),
            )));
        }
        _ => {}
    }
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' ').map(|(_, t)| t.trim().to_owned()))
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Err(err(
            401,
            codes::UNAUTHENTICATED,
            "missing bearer credential",
        ));
    };
    if !s.shell.token().accepts(&token) {
        return Err(err(
            401,
            codes::UNAUTHENTICATED,
            "the credential was rejected",
        ));
    }
    let owner = wire::sha256_hex(token.as_bytes())[..16].to_owned();
    Ok((owner, fault.filter(|f| !matches!(f, Fault::Latency(_)))))
}

/// Parses and validates an execution body.
fn parse_request(s: &Shared, body: &[u8]) -> Result<ExecuteRequest, Response> {
    if body.len() > s.options.max_payload_bytes {
        return Err(err(
            413,
            codes::EXECUTION_PAYLOAD_TOO_LARGE,
            &format!(
                "the body is larger than {} bytes",
                s.options.max_payload_bytes
            ),
        ));
    }
    let req: ExecuteRequest = serde_json::from_slice(body)
        .map_err(|e| err(400, codes::INVALID_REQUEST, &format!("invalid body: {e}")))?;
    req.validate()
        .and_then(|()| req.check_fields())
        .map_err(|m| err(400, codes::INVALID_REQUEST, &m))?;
    if let Some(p) = req
        .retrieve_files
        .iter()
        .find(|p| !crate::runner::retrieve_pattern_ok(p))
    {
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            &format!("retrieve_files: {p:?} is not a pattern below the working directory"),
        ));
    }
    if req.network_enabled == Some(false) && !req.dependencies.is_empty() {
        // Where the real service installs from with the network off is not published.
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            "dependencies with network_enabled=false: the install needs the network the \
             request turns off (not emulated)",
        ));
    }
    if s.runner.runtimes.get(req.language).is_none() {
        return Err(err(
            400,
            codes::INVALID_REQUEST,
            &format!(
                "language {} is not available in this sandbox image",
                req.language
            ),
        ));
    }
    Ok(req)
}

fn vanish(fault: Option<Fault>) -> Option<Duration> {
    (fault == Some(Fault::SandboxVanishes)).then_some(Duration::from_millis(200))
}

/// The synchronous answer of a run's end (the contract's one mapping).
fn end_response(end: RunEnd) -> Response {
    render(end.reply())
}

/// The common start of the synchronous runs (`/execute`, `/execute/stream`): admitted on `exec`,
/// a valid request, and a free sandbox (429 when every one is busy).
async fn admit_run(
    s: &Shared,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Option<Fault>, ExecuteRequest), Response> {
    let (_owner, fault) = admit(s, "exec", headers).await?;
    let req = parse_request(s, body)?;
    if !s.runner.try_reserve(s.options.max_concurrent) {
        return Err(render(error_reply(
            429,
            codes::EXECUTION_CAPACITY_EXCEEDED,
            "every sandbox is busy",
            Some(s.options.retry_after_secs),
        )));
    }
    Ok((fault, req))
}

async fn execute(
    State(s): S,
    headers: HeaderMap,
    conn: Option<axum::Extension<ConnControl>>,
    body: Bytes,
) -> Response {
    let (fault, req) = match admit_run(&s, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let end = s
        .runner
        .run(
            &req,
            s.options.default_timeout_secs,
            std::future::pending(),
            vanish(fault),
            None,
            || {},
        )
        .await;
    let resp = end_response(end);
    match fault {
        // The program ran; the answer is lost or broken.
        Some(Fault::ServerError) => err(500, codes::INTERNAL_ERROR, "internal error after the run"),
        Some(Fault::ResetBeforeResponse) => reset_connection(conn.as_deref()).await,
        Some(Fault::CutBeforeExit) => {
            let status = resp.status().as_u16();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap_or_default();
            cut(status, body.to_vec())
        }
        Some(Fault::MalformedBody) => malformed(200),
        _ => resp,
    }
}

/// Aborts the run when the SSE stream is dropped (the client went away).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum Sse {
    Chunk(Chunk),
    End(RunEnd),
}

fn sse_line(v: serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

async fn execute_stream(State(s): S, headers: HeaderMap, body: Bytes) -> Response {
    let (fault, req) = match admit_run(&s, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (tx, rx) = mpsc::unbounded_channel::<Sse>();
    let (ctx, mut crx) = mpsc::unbounded_channel::<Chunk>();
    let runner = s.runner.clone();
    let default_timeout = s.options.default_timeout_secs;
    let forward = tx.clone();
    let task = tokio::spawn(async move {
        let pump = tokio::spawn(async move {
            while let Some(c) = crx.recv().await {
                let _ = forward.send(Sse::Chunk(c));
            }
        });
        let end = runner
            .run(
                &req,
                default_timeout,
                std::future::pending(),
                vanish(fault),
                Some(ctx),
                || {},
            )
            .await;
        let _ = pump.await;
        let _ = tx.send(Sse::End(end));
    });
    let guard = AbortOnDrop(task.abort_handle());
    let stream = futures_util::stream::unfold((rx, guard), move |(mut rx, guard)| async move {
        let item = rx.recv().await?;
        let line = match item {
            Sse::Chunk(Chunk::Stdout(t)) => {
                sse_line(serde_json::json!({"type": "stdout", "text": t}))
            }
            Sse::Chunk(Chunk::Stderr(t)) => {
                sse_line(serde_json::json!({"type": "stderr", "text": t}))
            }
            Sse::End(_) if fault == Some(Fault::CutBeforeExit) => return None,
            Sse::End(_) if fault == Some(Fault::MalformedBody) => {
                Bytes::from_static(b"data: {\"type\": \"compl\n\n")
            }
            Sse::End(end) => sse_line(end.stream_event()),
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

async fn submit(
    State(s): S,
    headers: HeaderMap,
    conn: Option<axum::Extension<ConnControl>>,
    body: Bytes,
) -> Response {
    let (owner, fault) = match admit(&s, "exec", &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !s.options.async_enabled {
        return err(
            503,
            codes::ASYNC_EXECUTION_UNAVAILABLE,
            "asynchronous execution is disabled",
        );
    }
    // The key is checked before the body (seed 004: the empty-body probe got this code).
    let Some(key) = headers
        .get(wire::IDEMPOTENCY_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return err(
            400,
            codes::IDEMPOTENCY_KEY_MISSING,
            "Idempotency-Key is required",
        );
    };
    if let Err(m) = wire::check_idempotency_key(key) {
        return err(400, codes::INVALID_REQUEST, &m);
    }
    let req = match parse_request(&s, &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let now = SystemTime::now();
    s.store.collect_garbage(now, s.options.retention);
    let fresh = Record::new(
        format!("op_{}", hex_id(32)),
        owner,
        key,
        req.payload_hash(),
        now,
        s.options.retention,
    );
    let key_hash = fresh.key_hash.clone();
    let base = s.shell.base_url().to_owned();
    let retry = s.options.retry_after_secs;
    let reply = match s
        .store
        .submit(fresh, &key_hash, now, s.options.max_concurrent)
    {
        Submitted::Conflict => {
            return err(
                409,
                codes::IDEMPOTENCY_KEY_REUSE,
                "the key was used with another payload",
            );
        }
        Submitted::Full => {
            return render(error_reply(
                429,
                codes::EXECUTION_CAPACITY_EXCEEDED,
                "too many active executions",
                Some(retry),
            ));
        }
        Submitted::Replayed(rec) => contract::submit_reply(&rec, &base, retry),
        Submitted::Created(rec, cancel) => {
            tokio::spawn(drive(s.clone(), rec.id.clone(), req, cancel, vanish(fault)));
            contract::submit_reply(&rec, &base, retry)
        }
    };
    match fault {
        // The operation exists; the answer is lost or broken (the client must resubmit with
        // the same key and converge on it).
        Some(Fault::ServerError) => {
            err(500, codes::INTERNAL_ERROR, "internal error after accepting")
        }
        Some(Fault::ResetBeforeResponse) => reset_connection(conn.as_deref()).await,
        Some(Fault::CutBeforeExit) => cut(202, reply.body),
        Some(Fault::MalformedBody) => malformed(202),
        _ => render(reply),
    }
}

/// Runs one operation through its phases.
async fn drive(
    s: Arc<Shared>,
    id: String,
    req: ExecuteRequest,
    mut cancel: watch::Receiver<bool>,
    vanish: Option<Duration>,
) {
    let now = SystemTime::now;
    s.store.update(&id, |r| {
        r.advance(Status::Provisioning, Phase::SandboxCreate, now())
    });
    if !s.options.phase_delay.is_zero() {
        tokio::time::sleep(s.options.phase_delay).await;
    }
    // Wait for a process slot (queued behind other runs), unless cancelled meanwhile.
    let mut reserved = false;
    while !*cancel.borrow() {
        if s.runner.try_reserve(s.options.max_concurrent) {
            reserved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if *cancel.borrow() {
        if reserved {
            s.runner.release();
        }
        s.store.update(&id, |r| {
            r.finish(
                End::Without {
                    status: Status::Cancelled,
                    code: codes::EXECUTION_CANCELLED,
                    message: "cancelled before it ran".into(),
                },
                now(),
            )
        });
        return;
    }
    let store = s.store.clone();
    let started_id = id.clone();
    let cancelled = async move {
        let _ = cancel.wait_for(|c| *c).await;
    };
    let end = s
        .runner
        .run(
            &req,
            s.options.default_timeout_secs,
            cancelled,
            vanish,
            None,
            move || {
                store.update(&started_id, |r| {
                    r.advance(Status::Running, Phase::Execute, now())
                });
            },
        )
        .await;
    s.store.update(&id, |r| {
        r.advance(Status::Collecting, Phase::Collect, now())
    });
    s.store.update(&id, |r| r.finish(end.end(), now()));
}

/// The record, readable by `owner`, or the 404/410 reply.
fn readable(s: &Shared, id: &str, owner: &str) -> Result<Record, Response> {
    let rec = s.store.get(id);
    match contract::lookup_failure(rec.as_ref(), owner, SystemTime::now()) {
        Some(reply) => Err(render(reply)),
        None => Ok(rec.expect("readable")),
    }
}

/// Renders a read reply with the late faults of a read route.
async fn read_fault(
    reply: Reply,
    fault: Option<Fault>,
    conn: Option<axum::Extension<ConnControl>>,
) -> Response {
    match fault {
        Some(Fault::ServerError) => err(500, codes::INTERNAL_ERROR, "internal error"),
        Some(Fault::ResetBeforeResponse) => reset_connection(conn.as_deref()).await,
        Some(Fault::CutBeforeExit) if !reply.body.is_empty() => cut(reply.status, reply.body),
        // A malformed 304 is one without its ETag; any other answer gets a broken body.
        Some(Fault::MalformedBody) if reply.status == 304 => {
            let mut r = reply;
            r.headers.retain(|(k, _)| *k != "etag");
            render(r)
        }
        Some(Fault::MalformedBody) => malformed(reply.status),
        _ => render(reply),
    }
}

/// The common start of the read routes: admitted on `route`, for an execution the caller may
/// read.
async fn admit_read(
    s: &Shared,
    route: &str,
    id: &str,
    headers: &HeaderMap,
) -> Result<(Option<Fault>, Record), Response> {
    let (owner, fault) = admit(s, route, headers).await?;
    Ok((fault, readable(s, id, &owner)?))
}

async fn status(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
    conn: Option<axum::Extension<ConnControl>>,
) -> Response {
    let (fault, rec) = match admit_read(&s, "status", &id, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let inm = headers.get("if-none-match").and_then(|v| v.to_str().ok());
    read_fault(
        contract::status_reply(&rec, inm, s.options.retry_after_secs),
        fault,
        conn,
    )
    .await
}

async fn result(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
    conn: Option<axum::Extension<ConnControl>>,
) -> Response {
    let (fault, rec) = match admit_read(&s, "result", &id, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    read_fault(
        contract::result_reply(&rec, s.options.retry_after_secs),
        fault,
        conn,
    )
    .await
}

async fn cancel(
    State(s): S,
    Path(id): Path<String>,
    headers: HeaderMap,
    conn: Option<axum::Extension<ConnControl>>,
    body: Bytes,
) -> Response {
    let (owner, fault) = match admit(&s, "cancel", &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if let Err(r) = readable(&s, &id, &owner) {
        return r;
    }
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
    s.store.request_cancel(&id, SystemTime::now());
    let rec = s
        .store
        .wait_terminal(&id, s.options.cancel_wait)
        .await
        .expect("the record exists");
    read_fault(contract::cancel_reply(&rec), fault, conn).await
}
