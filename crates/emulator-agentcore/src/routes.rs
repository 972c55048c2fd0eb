//! The REST routes, authentication, and the rendering of faults in AgentCore's wire format.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::eventstream;
use super::tools::{self, Outcome, TOOL_NAMES};
use super::wire::{self, Exception};
use super::{AgentCoreFault, Armed, Session, SessionStatus, State};
use execseam_emulator_kit::{ConnControl, Fault, reset_connection};

/// What every route is given: the state, the code interpreter's identifier, the query, the
/// headers, the connection's control (for injected resets) and the body; extracted in that order.
struct Call {
    state: Arc<State>,
    identifier: String,
    q: HashMap<String, String>,
    headers: HeaderMap,
    ctl: Option<ConnControl>,
    body: Bytes,
}

impl FromRequest<Arc<State>> for Call {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<State>) -> Result<Call, Response> {
        let (mut parts, body) = req.into_parts();
        let Path(identifier) = Path::<String>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Query(q) = Query::<HashMap<String, String>>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        let ctl = parts.extensions.get::<ConnControl>().cloned();
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Call {
            state: state.clone(),
            identifier,
            q,
            headers,
            ctl,
            body,
        })
    }
}

impl Call {
    /// The common start of the routes with a JSON body: the armed fault (applied before anything
    /// else), the credentials, and the body (`{}` when empty).
    async fn admit_body(&self, route: &'static str) -> Result<(Option<Armed>, Value), Response> {
        let armed = self.state.take(route);
        if let Some(r) = before(armed, self.ctl.as_ref(), None).await {
            return Err(r);
        }
        authorize(&self.state, &self.headers)?;
        Ok((armed, parse_body(&self.body)?))
    }

    /// The common start of the session routes: the armed fault (applied before anything else),
    /// the credentials, the `sessionId` parameter, and the session of this code interpreter.
    async fn admit_session(
        &self,
        route: &'static str,
    ) -> Result<(Option<Armed>, Arc<Session>), Response> {
        let armed = self.state.take(route);
        if let Some(r) = before(armed, self.ctl.as_ref(), None).await {
            return Err(r);
        }
        authorize(&self.state, &self.headers)?;
        let sid = session_param(&self.q)?;
        let s = self
            .state
            .session(sid)
            .filter(|s| s.identifier == self.identifier)
            .ok_or_else(|| not_found(&format!("Session not found: {sid}")))?;
        Ok((armed, s))
    }
}

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/code-interpreters/{id}/sessions/start", put(start))
        .route("/code-interpreters/{id}/sessions/stop", put(stop))
        .route("/code-interpreters/{id}/sessions/get", get(get_session))
        .route("/code-interpreters/{id}/sessions/list", post(list))
        .route("/code-interpreters/{id}/tools/invoke", post(invoke))
        .fallback(unknown)
        .with_state(state)
}

async fn unknown() -> Response {
    wire::error_response(
        404,
        "UnknownOperationException",
        &json!({ "message": "Unknown operation" }),
    )
}

/// SigV4 is not verified: a credential must be named, and must be the configured one if any.
fn authorize(state: &State, headers: &HeaderMap) -> Result<(), Response> {
    let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(wire::error_response(
            403,
            "MissingAuthenticationTokenException",
            &json!({ "message": "Missing Authentication Token" }),
        ));
    };
    let key = auth
        .split("Credential=")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    let ok = state.shell.token().accepts(key);
    if ok {
        Ok(())
    } else {
        Err(unrecognized_client())
    }
}

fn unrecognized_client() -> Response {
    wire::error_response(
        403,
        "UnrecognizedClientException",
        &json!({ "message": "The security token included in the request is invalid." }),
    )
}

/// Renders the faults that answer before the operation runs; `None` lets it run.
async fn before(
    armed: Option<Armed>,
    ctl: Option<&ConnControl>,
    session: Option<&str>,
) -> Option<Response> {
    match armed? {
        Armed::Standard(Fault::Latency(d)) => {
            tokio::time::sleep(d).await;
            None
        }
        Armed::Standard(Fault::RateLimited { retry_after_secs }) => {
            let mut r = wire::exception(Exception::Throttling, "Rate exceeded");
            if let Ok(v) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                r.headers_mut().insert(http::header::RETRY_AFTER, v);
            }
            Some(r)
        }
        Armed::Standard(Fault::Unavailable) => Some(wire::error_response(
            503,
            "ServiceUnavailableException",
            &json!({ "message": "Service Unavailable" }),
        )),
        Armed::Standard(Fault::ResetBeforeResponse) => Some(reset_connection(ctl).await),
        Armed::Standard(Fault::AuthFailure) => Some(unrecognized_client()),
        Armed::Extra(AgentCoreFault::HttpException(e)) if e != Exception::InternalServer => {
            Some(wire::exception(e, &format!("injected {}", e.shape())))
        }
        Armed::Extra(AgentCoreFault::StreamException(e)) if e != Exception::InternalServer => Some(
            exception_stream(session, e, &format!("injected {}", e.member())),
        ),
        _ => None,
    }
}

/// An event stream of one exception frame, `e` with `message`.
fn exception_stream(session: Option<&str>, e: Exception, message: &str) -> Response {
    stream_response(
        session,
        vec![eventstream::exception_event(
            e.member(),
            e.body(message).to_string().as_bytes(),
        )],
        None,
    )
}

/// A body fed from a channel: the cut variant sends part of a frame, waits so it is flushed with
/// the head, then fails (hyper then closes the connection without ending the chunked body).
struct Chunks(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// A 200 event-stream response; with `cut`, the body is cut after that many bytes.
fn stream_response(session: Option<&str>, frames: Vec<Vec<u8>>, cut: Option<usize>) -> Response {
    let body: Vec<u8> = frames.concat();
    let body = match cut {
        None => Body::from(body),
        Some(n) => {
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            let part = Bytes::from(body[..n.min(body.len())].to_vec());
            tokio::spawn(async move {
                let _ = tx.send(Ok(part)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = tx
                    .send(Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "stream cut by fault injection",
                    )))
                    .await;
            });
            Body::from_stream(Chunks(rx))
        }
    };
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.amazon.eventstream"),
    );
    if let Some(sid) = session
        && let Ok(v) = HeaderValue::from_str(sid)
    {
        h.insert("x-amzn-code-interpreter-session-id", v);
    }
    if let Ok(v) = HeaderValue::from_str(&wire::uuid()) {
        h.insert("x-amzn-requestid", v);
    }
    resp
}

fn parse_body(body: &Bytes) -> Result<Value, Response> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(cannot_parse)
}

fn cannot_parse(e: serde_json::Error) -> Response {
    wire::error_response(
        400,
        "ValidationException",
        &json!({ "message": format!("Could not parse the request body: {e}"), "reason": "CannotParse" }),
    )
}

fn validation(message: &str) -> Response {
    wire::exception(Exception::Validation, message)
}

async fn start(call: Call) -> Result<Response, Response> {
    let (armed, req) = call.admit_body("start").await?;
    let Call {
        state, identifier, ..
    } = call;
    let timeout = req
        .get("sessionTimeoutSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(900);
    if !(1..=28_800).contains(&timeout) {
        return Err(validation(&format!(
            "1 validation error detected: Value '{timeout}' at 'sessionTimeoutSeconds' failed to satisfy constraint: Member must have value between 1 and 28800"
        )));
    }
    let name = req
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(wire::uuid);
    if name.is_empty() || name.len() > 100 {
        return Err(validation(
            "1 validation error detected: Value at 'name' failed to satisfy constraint: Member must have length between 1 and 100",
        ));
    }
    let token = req
        .get("clientToken")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // The idempotency token: the same token returns the same session.
    if let Some(t) = &token {
        let known = state.tokens.lock().expect("tokens").get(t).cloned();
        if let Some(s) = known.and_then(|sid| state.session(&sid)) {
            return Ok(started(&s));
        }
    }
    let session = match state.create_session(&identifier, name, Duration::from_secs(timeout as u64))
    {
        Ok(s) => s,
        Err(e) => {
            return Err(wire::exception(
                Exception::InternalServer,
                &format!("cannot create the session sandbox: {e}"),
            ));
        }
    };
    if let Some(t) = token {
        state
            .tokens
            .lock()
            .expect("tokens")
            .insert(t, session.id.clone());
    }
    if matches!(armed, Some(Armed::Standard(Fault::ServerError))) {
        return Err(wire::exception(
            Exception::InternalServer,
            "Internal server error",
        ));
    }
    Ok(started(&session))
}

/// The answer to a start (a new session, or the one a known client token started).
fn started(s: &Session) -> Response {
    wire::ok_json(&json!({
        "codeInterpreterIdentifier": s.identifier,
        "sessionId": s.id,
        "createdAt": wire::iso8601(s.created_at),
    }))
}

fn session_param(q: &HashMap<String, String>) -> Result<&str, Response> {
    q.get("sessionId")
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| validation("1 validation error detected: Value null at 'sessionId' failed to satisfy constraint: Member must not be null"))
}

fn not_found(what: &str) -> Response {
    wire::exception(Exception::ResourceNotFound, what)
}

async fn stop(call: Call) -> Result<Response, Response> {
    let (armed, s) = call.admit_session("stop").await?;
    s.terminate();
    if matches!(armed, Some(Armed::Standard(Fault::ServerError))) {
        return Err(wire::exception(
            Exception::InternalServer,
            "Internal server error",
        ));
    }
    let updated = *s.last_updated.lock().expect("last updated");
    Ok(wire::ok_json(&json!({
        "codeInterpreterIdentifier": s.identifier,
        "sessionId": s.id,
        "lastUpdatedAt": wire::iso8601(updated),
    })))
}

async fn get_session(call: Call) -> Result<Response, Response> {
    let (_, s) = call.admit_session("get").await?;
    Ok(wire::ok_json(&json!({
        "codeInterpreterIdentifier": s.identifier,
        "sessionId": s.id,
        "name": s.name,
        "createdAt": wire::iso8601(s.created_at),
        "sessionTimeoutSeconds": s.timeout.as_secs(),
        "status": s.status().as_str(),
    })))
}

async fn list(call: Call) -> Result<Response, Response> {
    let (_, req) = call.admit_body("list").await?;
    let Call {
        state, identifier, ..
    } = call;
    let max = req.get("maxResults").and_then(Value::as_u64).unwrap_or(10);
    if !(1..=100).contains(&max) {
        return Err(validation("maxResults must be between 1 and 100"));
    }
    let from: usize = match req.get("nextToken").and_then(Value::as_str) {
        Some(t) => match t.parse() {
            Ok(n) => n,
            Err(_) => return Err(validation("Invalid nextToken")),
        },
        None => 0,
    };
    let want = req.get("status").and_then(Value::as_str);
    // Refresh expiries, then list newest first.
    let all: Vec<_> = state
        .sessions
        .lock()
        .expect("sessions")
        .values()
        .rev()
        .cloned()
        .collect();
    let matching: Vec<_> = all
        .into_iter()
        .filter(|s| s.identifier == identifier)
        .filter_map(|s| state.session(&s.id))
        .filter(|s| want.is_none_or(|w| s.status().as_str() == w))
        .collect();
    let page: Vec<Value> = matching
        .iter()
        .skip(from)
        .take(max as usize)
        .map(|s| {
            json!({
                "codeInterpreterIdentifier": s.identifier,
                "sessionId": s.id,
                "name": s.name,
                "status": s.status().as_str(),
                "createdAt": wire::iso8601(s.created_at),
                "lastUpdatedAt": wire::iso8601(*s.last_updated.lock().expect("last updated")),
            })
        })
        .collect();
    let mut out = json!({ "items": page });
    if from + (max as usize) < matching.len() {
        out["nextToken"] = Value::String((from + max as usize).to_string());
    }
    Ok(wire::ok_json(&out))
}

async fn invoke(call: Call) -> Response {
    let Call {
        state,
        identifier,
        headers,
        ctl,
        body,
        ..
    } = call;
    let req = serde_json::from_slice::<Value>(&body);
    let tool = req
        .as_ref()
        .ok()
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let armed = state.take(tools::route_of(&tool));
    let sid_header = headers
        .get("x-amzn-code-interpreter-session-id")
        .and_then(|v| v.to_str().ok());
    if let Some(r) = before(armed, ctl.as_ref(), sid_header).await {
        return r;
    }
    if let Err(r) = authorize(&state, &headers) {
        return r;
    }
    let req = match req {
        Ok(v) => v,
        Err(e) => return cannot_parse(e),
    };
    if !TOOL_NAMES.contains(&tool.as_str()) {
        return validation(&format!(
            "1 validation error detected: Value '{tool}' at 'name' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
            TOOL_NAMES.join(", ")
        ));
    }
    let Some(sid) = headers
        .get("x-amzn-code-interpreter-session-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty())
    else {
        return validation("A session id (x-amzn-code-interpreter-session-id) is required");
    };
    let Some(session) = state.session(sid).filter(|s| s.identifier == identifier) else {
        return not_found(&format!("Session not found: {sid}"));
    };
    if session.status() == SessionStatus::Terminated {
        return not_found(&format!("Session {sid} is terminated"));
    }
    let args = req.get("arguments").cloned().unwrap_or_else(|| json!({}));
    let vanish = matches!(armed, Some(Armed::Standard(Fault::SandboxVanishes)));
    let outcome = tools::run_tool(&state, &session, &tool, &args, vanish).await;
    let result = match outcome {
        Outcome::Vanished(message) => {
            return exception_stream(Some(sid), Exception::ResourceNotFound, &message);
        }
        Outcome::Result(r) => r.to_string().into_bytes(),
    };
    let frame = eventstream::result_event(&result);
    match armed {
        Some(Armed::Standard(Fault::ServerError))
        | Some(Armed::Extra(AgentCoreFault::HttpException(Exception::InternalServer))) => {
            wire::exception(Exception::InternalServer, "Internal server error")
        }
        Some(Armed::Extra(AgentCoreFault::StreamException(e))) => {
            exception_stream(Some(sid), e, &format!("injected {}", e.member()))
        }
        Some(Armed::Standard(Fault::CutBeforeExit)) => {
            let half = frame.len() / 2;
            stream_response(Some(sid), vec![frame], Some(half))
        }
        Some(Armed::Standard(Fault::MalformedBody)) => stream_response(
            Some(sid),
            vec![eventstream::result_event(
                br#"{"content": [{"type": "text", "te"#,
            )],
            None,
        ),
        Some(Armed::Extra(AgentCoreFault::UnknownException)) => stream_response(
            Some(sid),
            vec![eventstream::exception_event(
                "mysteryException",
                br#"{"message":"an exception this model does not have"}"#,
            )],
            None,
        ),
        Some(Armed::Extra(AgentCoreFault::ErrorFrame)) => stream_response(
            Some(sid),
            vec![eventstream::error_message(
                "InternalFailure",
                "An internal error occurred",
            )],
            None,
        ),
        Some(Armed::Extra(AgentCoreFault::BadPreludeCrc)) => {
            let mut f = frame;
            f[9] ^= 0x5a;
            stream_response(Some(sid), vec![f], None)
        }
        Some(Armed::Extra(AgentCoreFault::BadMessageCrc)) => {
            let mut f = frame;
            let last = f.len() - 1;
            f[last] ^= 0x5a;
            stream_response(Some(sid), vec![f], None)
        }
        Some(Armed::Extra(AgentCoreFault::NoResult)) => stream_response(Some(sid), vec![], None),
        _ => stream_response(Some(sid), vec![frame], None),
    }
}
