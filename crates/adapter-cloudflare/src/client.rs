//! HTTP calls to the bridge Worker.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_core::{Error, ErrorKind, Retry};
use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, RequestBuilder, Response};

use crate::PROVIDER;
use crate::config::CloudflareConfig;
use crate::error::{Phase, http_error, protocol, transport_error};
use crate::wire::{
    CreateSandboxResponse, CreateSessionRequest, CreateSessionResponse, ExecEvent, ExecRequest,
    RunningResponse, SseDecoder, WriteResponse, exec_event,
};

/// A client of one bridge Worker.
#[derive(Clone)]
pub struct BridgeClient {
    http: reqwest::Client,
    config: Arc<CloudflareConfig>,
}

impl std::fmt::Debug for BridgeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The decoded events of one exec stream, in order; ends after the first terminal event, at the
/// end of the body (the caller decides what a missing terminal means), or with an `Err`.
pub type ExecEvents = Pin<Box<dyn Stream<Item = Result<ExecEvent, Error>> + Send>>;

/// Percent-encodes a sandbox path for the `/file/<path>` route (keeps `/` and unreserved bytes).
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.trim_start_matches('/').bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?;
    execseam_adapter_kit::retry::parse_retry_after(v, std::time::SystemTime::now())
}

impl BridgeClient {
    /// A client for `config` (rustls with ring; no automatic retries: an exec is never re-sent).
    pub fn new(config: Arc<CloudflareConfig>) -> Result<BridgeClient, Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut headers = HeaderMap::new();
        if let Some(key) = config.bearer() {
            let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                crate::config::config_error("the API key is not a valid header value")
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
            .retry(reqwest::retry::never())
            .user_agent(concat!("execseam-cloudflare/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("cannot build the HTTP client: {e}"),
                )
                .with_provider(PROVIDER)
                .with_operation("config")
            })?;
        Ok(BridgeClient { http, config })
    }

    /// The configuration.
    pub fn config(&self) -> &CloudflareConfig {
        &self.config
    }

    fn url(&self, rest: &str) -> String {
        format!("{}{}{rest}", self.config.base_url, self.config.api_prefix)
    }

    fn request(&self, method: Method, rest: &str, timeout: bool) -> RequestBuilder {
        let mut rb = self.http.request(method, self.url(rest));
        if let Some(sid) = &self.config.session_id {
            rb = rb.header("Session-Id", sid);
        }
        if timeout {
            rb = rb.timeout(self.config.request_timeout);
        }
        rb
    }

    async fn send(
        &self,
        rb: RequestBuilder,
        operation: &'static str,
        phase: Phase,
    ) -> Result<Response, Error> {
        let resp = rb
            .send()
            .await
            .map_err(|e| transport_error(e, operation, phase))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let after = retry_after(resp.headers());
        let body = read_limited(resp, MAX_ERROR_BODY, operation, phase)
            .await
            .unwrap_or_default();
        Err(http_error(status, after, &body, operation, phase))
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        resp: Response,
        operation: &'static str,
        phase: Phase,
    ) -> Result<T, Error> {
        let body = read_limited(resp, self.config.max_answer_bytes, operation, phase).await?;
        serde_json::from_slice(&body).map_err(|e| {
            protocol(
                format!(
                    "unexpected answer {:?}: {e}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
                operation,
                phase,
            )
        })
    }

    /// `POST /v1/sandbox`: a fresh sandbox id (no container is assigned until first use).
    pub async fn create_sandbox(&self) -> Result<String, Error> {
        let rb = self.request(Method::POST, "/sandbox", true);
        let resp = self.send(rb, "create_sandbox", Phase::Idempotent).await?;
        let r: CreateSandboxResponse = self.json(resp, "create_sandbox", Phase::Idempotent).await?;
        if !crate::config::valid_sandbox_id(&r.id) {
            return Err(protocol(
                format!("the bridge minted an invalid sandbox id {:?}", r.id),
                "create_sandbox",
                Phase::Idempotent,
            ));
        }
        Ok(r.id)
    }

    /// `DELETE /v1/sandbox/{id}` (204, also for an id that never had a container).
    pub async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        let rb = self.request(Method::DELETE, &format!("/sandbox/{id}"), true);
        self.send(rb, "delete_sandbox", Phase::Idempotent).await?;
        Ok(())
    }

    /// `GET /v1/sandbox/{id}/running`.
    pub async fn running(&self, id: &str) -> Result<bool, Error> {
        let rb = self.request(Method::GET, &format!("/sandbox/{id}/running"), true);
        let resp = self.send(rb, "running", Phase::Idempotent).await?;
        let r: RunningResponse = self.json(resp, "running", Phase::Idempotent).await?;
        Ok(r.running)
    }

    /// `PUT /v1/sandbox/{id}/file/<path>` with raw bytes (at most 32 MiB; the bridge creates
    /// parent directories through the SDK's write).
    pub async fn write_file(&self, id: &str, path: &str, data: Bytes) -> Result<(), Error> {
        let rb = self
            .request(
                Method::PUT,
                &format!("/sandbox/{id}/file/{}", encode_path(path)),
                true,
            )
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(data);
        let resp = self.send(rb, "write_file", Phase::Idempotent).await?;
        let r: WriteResponse = self.json(resp, "write_file", Phase::Idempotent).await?;
        if !r.ok {
            return Err(protocol(
                "the write answered ok: false",
                "write_file",
                Phase::Idempotent,
            ));
        }
        Ok(())
    }

    /// `GET /v1/sandbox/{id}/file/<path>`: the raw bytes.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Bytes, Error> {
        let rb = self.request(
            Method::GET,
            &format!("/sandbox/{id}/file/{}", encode_path(path)),
            true,
        );
        let resp = self.send(rb, "read_file", Phase::Idempotent).await?;
        read_limited(
            resp,
            self.config.max_answer_bytes,
            "read_file",
            Phase::Idempotent,
        )
        .await
    }

    /// `POST /v1/sandbox/{id}/session`.
    pub async fn create_session(
        &self,
        id: &str,
        request: &CreateSessionRequest,
    ) -> Result<String, Error> {
        let rb = self
            .request(Method::POST, &format!("/sandbox/{id}/session"), true)
            .json(request);
        let resp = self.send(rb, "create_session", Phase::Idempotent).await?;
        let r: CreateSessionResponse = self.json(resp, "create_session", Phase::Idempotent).await?;
        Ok(r.id)
    }

    /// `DELETE /v1/sandbox/{id}/session/{sid}`.
    pub async fn delete_session(&self, id: &str, sid: &str) -> Result<(), Error> {
        let rb = self.request(
            Method::DELETE,
            &format!("/sandbox/{id}/session/{sid}"),
            true,
        );
        self.send(rb, "delete_session", Phase::Idempotent).await?;
        Ok(())
    }

    /// `POST /v1/sandbox/{id}/exec`: submits the command once (never retried) and returns its
    /// events. JSON errors before the stream become an `Err` here; an SSE `error` event is an
    /// item of the stream.
    pub async fn exec(&self, id: &str, request: &ExecRequest) -> Result<ExecEvents, Error> {
        // No whole-request timeout: the stream lasts as long as the command. But each event
        // (and the answer's head) must come within the idle timeout: the bridge sends no
        // keepalives, so silence longer than that is a dead stream.
        let idle = self.config.stream_idle_timeout;
        let rb = self
            .request(Method::POST, &format!("/sandbox/{id}/exec"), false)
            .header(ACCEPT, "text/event-stream")
            .json(request);
        let resp = match tokio::time::timeout(idle, self.send(rb, "exec", Phase::ExecSubmit)).await
        {
            Ok(r) => r?,
            Err(_) => return Err(idle_error(idle, Phase::ExecSubmit)),
        };
        let ct = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !ct.starts_with("text/event-stream") {
            let status = resp.status().as_u16();
            // Only what the message quotes: the body may be endless.
            let body = read_limited(resp, 200, "exec", Phase::ExecSubmit)
                .await
                .unwrap_or_else(|e| Bytes::from(e.to_string()));
            return Err(protocol(
                format!(
                    "the exec answered HTTP {status} with {ct:?} instead of an event stream: {:?}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
                "exec",
                Phase::ExecSubmit,
            ));
        }
        Ok(Box::pin(sse_events(
            resp.bytes_stream(),
            idle,
            self.config.max_answer_bytes,
        )))
    }
}

/// The most of an error answer read.
const MAX_ERROR_BODY: usize = 64 << 10;

/// Reads at most `limit` bytes of a body; more is an `OutputLimit` error.
async fn read_limited(
    resp: Response,
    limit: usize,
    operation: &'static str,
    phase: Phase,
) -> Result<Bytes, Error> {
    let mut body = bytes::BytesMut::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| transport_error(e, operation, phase))?;
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            if limit <= 200 {
                // A quote: what fits is enough.
                return Ok(body.freeze());
            }
            return Err(Error::new(
                ErrorKind::OutputLimit,
                format!(
                    "the answer exceeds the {limit}-byte limit (CloudflareConfig::max_answer_bytes)"
                ),
            )
            .with_retry(if phase == Phase::Idempotent {
                Retry::Never
            } else {
                Retry::Unsafe
            })
            .with_provider(PROVIDER)
            .with_operation(operation));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

fn idle_error(idle: Duration, phase: Phase) -> Error {
    Error::new(
        ErrorKind::Timeout(execseam_core::Deadline::Request),
        format!(
            "no exec event for {}ms (the stream idle timeout; the bridge sends no keepalives)",
            idle.as_millis()
        ),
    )
    .with_retry(if phase == Phase::Idempotent {
        Retry::SAFE
    } else {
        Retry::Unsafe
    })
    .with_provider(PROVIDER)
    .with_operation("exec")
}

struct State<S> {
    body: S,
    decoder: SseDecoder,
    queue: VecDeque<Result<ExecEvent, Error>>,
    done: bool,
    idle: Duration,
    /// When the current event began to be awaited.
    since: tokio::time::Instant,
}

fn sse_events<S>(
    body: S,
    idle: Duration,
    max_line: usize,
) -> impl Stream<Item = Result<ExecEvent, Error>> + Send
where
    S: Stream<Item = reqwest::Result<Bytes>> + Send + Unpin + 'static,
{
    let state = State {
        body,
        decoder: SseDecoder::with_limit(max_line),
        queue: VecDeque::new(),
        done: false,
        idle,
        since: tokio::time::Instant::now(),
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                if item.is_err() {
                    st.queue.clear();
                    st.done = true;
                }
                st.since = tokio::time::Instant::now();
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            // A decode loop must not starve the runtime (a host deadline in this task, other
            // tasks on this worker): each chunk costs budget, and yields when it is spent.
            tokio::task::consume_budget().await;
            let next = tokio::time::timeout_at(st.since + st.idle, st.body.next()).await;
            let Ok(next) = next else {
                st.done = true;
                return Some((Err(idle_error(st.idle, Phase::ExecStream)), st));
            };
            match next {
                None => {
                    st.done = true;
                    if st.decoder.pending() {
                        return Some((
                            Err(protocol(
                                "the exec stream ended inside an event",
                                "exec",
                                Phase::ExecStream,
                            )),
                            st,
                        ));
                    }
                    return None;
                }
                Some(Err(e)) => {
                    st.done = true;
                    let mut err = transport_error(e, "exec", Phase::ExecStream);
                    if err.retry() != Retry::Unsafe {
                        err = err.with_retry(Retry::Unsafe);
                    }
                    return Some((Err(err), st));
                }
                Some(Ok(chunk)) => match st.decoder.push(&chunk) {
                    Err(why) => {
                        st.done = true;
                        return Some((Err(protocol(why, "exec", Phase::ExecStream)), st));
                    }
                    Ok(events) => {
                        for ev in events {
                            st.queue.push_back(
                                exec_event(&ev)
                                    .map_err(|why| protocol(why, "exec", Phase::ExecStream)),
                            );
                        }
                    }
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_for_the_file_route() {
        assert_eq!(
            encode_path("/workspace/a b/é.txt"),
            "workspace/a%20b/%C3%A9.txt"
        );
        assert_eq!(
            encode_path("/workspace/.execseam/x-1"),
            "workspace/.execseam/x-1"
        );
    }
}
