//! HTTP calls to the bridge Worker.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::http::{self, ClientOptions, Refusal};
use execseam_adapter_kit::retry::Stage;
use execseam_core::{Error, ErrorKind, Retry};
use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, Response};

use crate::PROVIDER;
use crate::config::CloudflareConfig;
use crate::error::{call, http_error, protocol};
use crate::wire::{
    CreateSandboxResponse, ExecEvent, ExecRequest, RunningResponse, SseDecoder, TunnelResponse,
    WriteResponse, exec_event,
};
#[cfg(test)]
use crate::wire::{CreateSessionRequest, CreateSessionResponse};

/// A client of one bridge Worker.
#[derive(Clone)]
pub struct BridgeClient {
    http: reqwest::Client,
    /// HTTP/1.1 only, for the terminal's WebSocket upgrade.
    upgrades: reqwest::Client,
    config: Arc<CloudflareConfig>,
}

execseam_adapter_kit::debug_fields!(self => BridgeClient { config: self.config });

/// The decoded events of one exec stream, in order; ends after the first terminal event, at the
/// end of the body (the caller decides what a missing terminal means), or with an `Err`.
pub type ExecEvents = Pin<Box<dyn Stream<Item = Result<ExecEvent, Error>> + Send>>;

/// The largest tar the bridge's `hydrate` takes (`MAX_HYDRATE_BYTES`, 32 MiB: `routes.ts`).
pub const MAX_HYDRATE: usize = 32 * 1024 * 1024;

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

impl BridgeClient {
    /// A client for `config` (rustls with ring; no automatic retries: an exec is never re-sent).
    pub fn new(config: Arc<CloudflareConfig>) -> Result<BridgeClient, Error> {
        let mut headers = HeaderMap::new();
        if let Some(key) = config.bearer() {
            let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                execseam_adapter_kit::vars::config_error(
                    PROVIDER,
                    "the API key is not a valid header value",
                )
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        let options = ClientOptions::new(config.connect_timeout).default_headers(headers);
        let http = http::client(PROVIDER, options.clone())?;
        let upgrades = http::client(PROVIDER, options.http1_only())?;
        Ok(BridgeClient {
            http,
            upgrades,
            config,
        })
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
        stage: Stage,
    ) -> Result<Response, Error> {
        let resp = rb
            .send()
            .await
            .map_err(|e| http::transport_error(call(operation, stage), e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let r = Refusal::read(resp, self.config.request_timeout).await;
        Err(http_error(
            r.status,
            r.retry_after(),
            &r.body,
            operation,
            stage,
        ))
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        resp: Response,
        operation: &'static str,
        stage: Stage,
    ) -> Result<T, Error> {
        let body = read_limited(
            resp,
            self.config.max_answer_bytes,
            self.config.request_timeout,
            operation,
            stage,
        )
        .await?;
        serde_json::from_slice(&body).map_err(|e| {
            protocol(
                format!(
                    "unexpected answer {:?}: {e}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
                operation,
                stage,
            )
        })
    }

    /// `POST /v1/sandbox`: a fresh sandbox id (no container is assigned until first use).
    pub async fn create_sandbox(&self) -> Result<String, Error> {
        let rb = self.request(Method::POST, "/sandbox", true);
        let resp = self.send(rb, "create_sandbox", Stage::Before).await?;
        let r: CreateSandboxResponse = self.json(resp, "create_sandbox", Stage::Before).await?;
        if !crate::config::valid_sandbox_id(&r.id) {
            return Err(protocol(
                format!("the bridge minted an invalid sandbox id {:?}", r.id),
                "create_sandbox",
                Stage::Before,
            ));
        }
        Ok(r.id)
    }

    /// `DELETE /v1/sandbox/{id}` (204, also for an id that never had a container).
    pub async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        let rb = self.request(Method::DELETE, &format!("/sandbox/{id}"), true);
        self.send(rb, "delete_sandbox", Stage::Before).await?;
        Ok(())
    }

    /// `POST /v1/sandbox/{id}/tunnel/{port}` without a body: the port's ephemeral tunnel (the
    /// one already recorded for it, or a new one).
    pub async fn tunnel(&self, id: &str, port: u16) -> Result<TunnelResponse, Error> {
        let rb = self.request(Method::POST, &format!("/sandbox/{id}/tunnel/{port}"), true);
        let resp = self.send(rb, "expose", Stage::Before).await?;
        self.json(resp, "expose", Stage::Before).await
    }

    /// `DELETE /v1/sandbox/{id}/tunnel/{port}` (204, also when there was none).
    pub async fn delete_tunnel(&self, id: &str, port: u16) -> Result<(), Error> {
        let rb = self.request(
            Method::DELETE,
            &format!("/sandbox/{id}/tunnel/{port}"),
            true,
        );
        self.send(rb, "unexpose", Stage::Before).await?;
        Ok(())
    }

    /// `POST /v1/sandbox/{id}/persist?excludes=<dir>`: the bridge's tar of `/workspace` without
    /// `exclude` (a path relative to it), read up to [`MAX_HYDRATE`] bytes (a larger one could
    /// not be hydrated: `OutputLimit`).
    pub async fn persist(&self, id: &str, exclude: &str) -> Result<Bytes, Error> {
        let rest = format!("/sandbox/{id}/persist?excludes={}", encode_path(exclude));
        let rb = self.request(Method::POST, &rest, true);
        let resp = self.send(rb, "snapshot", Stage::Before).await?;
        let tar = read_limited(
            resp,
            MAX_HYDRATE + 1,
            self.config.request_timeout,
            "snapshot",
            Stage::Before,
        )
        .await?;
        if tar.len() > MAX_HYDRATE {
            return Err(Error::new(
                ErrorKind::OutputLimit,
                format!("/workspace's tar is over {MAX_HYDRATE} bytes: the bridge's hydrate could not take it back"),
            )
            .with_provider(PROVIDER)
            .with_operation("snapshot"));
        }
        Ok(tar)
    }

    /// `POST /v1/sandbox/{id}/hydrate` with a tar: extracted over `/workspace` (files in the
    /// tar replace the sandbox's, others stay).
    pub async fn hydrate(&self, id: &str, tar: Bytes) -> Result<(), Error> {
        let rest = format!("/sandbox/{id}/hydrate");
        self.put_bytes(Method::POST, &rest, tar, "create").await
    }

    /// Sends `data` as an octet stream; the answer is `{"ok": true}`.
    async fn put_bytes(
        &self,
        method: Method,
        rest: &str,
        data: Bytes,
        operation: &'static str,
    ) -> Result<(), Error> {
        let rb = self
            .request(method, rest, true)
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(data);
        let resp = self.send(rb, operation, Stage::Before).await?;
        let r: WriteResponse = self.json(resp, operation, Stage::Before).await?;
        if !r.ok {
            return Err(protocol(
                format!("{rest} answered ok: false"),
                operation,
                Stage::Before,
            ));
        }
        Ok(())
    }

    /// `GET /v1/sandbox/{id}/running`.
    pub async fn running(&self, id: &str) -> Result<bool, Error> {
        let rb = self.request(Method::GET, &format!("/sandbox/{id}/running"), true);
        let resp = self.send(rb, "running", Stage::Before).await?;
        let r: RunningResponse = self.json(resp, "running", Stage::Before).await?;
        Ok(r.running)
    }

    /// `PUT /v1/sandbox/{id}/file/<path>` with raw bytes (at most 32 MiB; the bridge creates
    /// parent directories through the SDK's write).
    pub async fn write_file(&self, id: &str, path: &str, data: Bytes) -> Result<(), Error> {
        let rest = format!("/sandbox/{id}/file/{}", encode_path(path));
        self.put_bytes(Method::PUT, &rest, data, "write_file").await
    }

    /// `GET /v1/sandbox/{id}/file/<path>`: the raw bytes.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Bytes, Error> {
        let rb = self.request(
            Method::GET,
            &format!("/sandbox/{id}/file/{}", encode_path(path)),
            true,
        );
        let resp = self.send(rb, "read_file", Stage::Before).await?;
        read_limited(
            resp,
            self.config.max_answer_bytes,
            self.config.request_timeout,
            "read_file",
            Stage::Before,
        )
        .await
    }

    /// `POST /v1/sandbox/{id}/session` (the adapter only joins sessions made elsewhere; its
    /// tests make them).
    #[cfg(test)]
    pub async fn create_session(
        &self,
        id: &str,
        request: &CreateSessionRequest,
    ) -> Result<String, Error> {
        let rb = self
            .request(Method::POST, &format!("/sandbox/{id}/session"), true)
            .json(request);
        let resp = self.send(rb, "create_session", Stage::Before).await?;
        let r: CreateSessionResponse = self.json(resp, "create_session", Stage::Before).await?;
        Ok(r.id)
    }

    /// `DELETE /v1/sandbox/{id}/session/{sid}`: the container destroys the session, its shell
    /// and its terminal (`session-manager.ts` `deleteSession` → `Session.destroy` → `Pty.destroy`:
    /// the terminal's program killed, the terminal closed).
    pub async fn delete_session(&self, id: &str, sid: &str) -> Result<(), Error> {
        let rb = self.request(
            Method::DELETE,
            &format!("/sandbox/{id}/session/{sid}"),
            true,
        );
        self.send(rb, "delete_session", Stage::Before).await?;
        Ok(())
    }

    /// `GET /v1/sandbox/{id}/pty?cols&rows&session&shell` upgraded to the terminal's WebSocket
    /// (bridge `routes.ts` `/sandbox/:id/pty`: `?session=` names the session whose one terminal
    /// it is, `shell` the program the container spawns on it). No `Session-Id` header: it
    /// would win over `?session=`.
    pub async fn pty(
        &self,
        id: &str,
        session: &str,
        shell: &str,
        rows: u16,
        cols: u16,
    ) -> Result<execseam_adapter_kit::ws::Socket, Error> {
        let mut url =
            reqwest::Url::parse(&self.url(&format!("/sandbox/{id}/pty"))).map_err(|e| {
                protocol(
                    format!("the terminal's URL: {e}"),
                    "terminal",
                    Stage::Before,
                )
            })?;
        url.query_pairs_mut()
            .append_pair("cols", &cols.to_string())
            .append_pair("rows", &rows.to_string())
            .append_pair("session", session)
            .append_pair("shell", shell);
        let rb = self.upgrades.get(url);
        let up = execseam_adapter_kit::ws::upgrade(rb, self.config.request_timeout, 64 << 20)
            .await
            .map_err(|e| {
                e.into_error(call("terminal", Stage::Submit), |r| {
                    http_error(
                        r.status,
                        r.retry_after(),
                        &r.body,
                        "terminal",
                        Stage::Submit,
                    )
                })
            })?;
        Ok(up.socket)
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
        let resp = match tokio::time::timeout(idle, self.send(rb, "exec", Stage::Submit)).await {
            Ok(r) => r?,
            Err(_) => return Err(idle_error(idle, Stage::Submit)),
        };
        let ct = http::content_type(resp.headers()).to_ascii_lowercase();
        if !ct.starts_with("text/event-stream") {
            let status = resp.status().as_u16();
            // Only what the message quotes, and only as long as an event may take: the body may
            // be endless, or stall.
            let body = http::read_error_body(resp, 200, idle).await;
            return Err(protocol(
                format!(
                    "the exec answered HTTP {status} with {ct:?} instead of an event stream: {:?}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
                "exec",
                Stage::Submit,
            ));
        }
        Ok(Box::pin(sse_events(
            resp.bytes_stream(),
            idle,
            self.config.max_answer_bytes,
        )))
    }
}

/// Reads at most `limit` bytes of a body within the request timeout; more is an
/// `OutputLimit` error (CloudflareConfig::max_answer_bytes).
async fn read_limited(
    resp: Response,
    limit: usize,
    within: Duration,
    operation: &'static str,
    stage: Stage,
) -> Result<Bytes, Error> {
    http::read_body(resp, limit, within)
        .await
        .map_err(|e| e.into_error(call(operation, stage)))
}

fn idle_error(idle: Duration, stage: Stage) -> Error {
    Error::new(
        ErrorKind::Timeout(execseam_core::Deadline::Request),
        format!(
            "no exec event for {}ms (the stream idle timeout; the bridge sends no keepalives)",
            idle.as_millis()
        ),
    )
    .with_retry(if stage == Stage::Before {
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
                return Some((Err(idle_error(st.idle, Stage::After)), st));
            };
            match next {
                None => {
                    st.done = true;
                    if st.decoder.pending() {
                        return Some((
                            Err(protocol(
                                "the exec stream ended inside an event",
                                "exec",
                                Stage::After,
                            )),
                            st,
                        ));
                    }
                    return None;
                }
                Some(Err(e)) => {
                    st.done = true;
                    let mut err = http::transport_error(call("exec", Stage::After), e);
                    if err.retry() != Retry::Unsafe {
                        err = err.with_retry(Retry::Unsafe);
                    }
                    return Some((Err(err), st));
                }
                Some(Ok(chunk)) => match st.decoder.push(&chunk) {
                    Err(why) => {
                        st.done = true;
                        return Some((Err(protocol(why, "exec", Stage::After)), st));
                    }
                    Ok(events) => {
                        for ev in events {
                            st.queue.push_back(
                                exec_event(&ev).map_err(|why| protocol(why, "exec", Stage::After)),
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
