//! The Connect protocol (<https://connectrpc.com/docs/protocol>) as E2B's SDKs speak it to envd:
//! the JSON codec, no compression, over HTTP/1.1 or HTTP/2.
//!
//! - **Unary**: `POST /<pkg>.<Service>/<Method>`, `Content-Type: application/json`, the bare JSON
//!   message both ways. An error is a non-200 status with `{"code":"<connect code>","message":…}`.
//! - **Server stream**: `Content-Type: application/connect+json`; the request is one enveloped
//!   message and the response a sequence of envelopes (`[flags:u8][len:u32 BE][payload]`) ending
//!   with an end-stream envelope (flag `0x02`) whose JSON carries an `error` when the call failed,
//!   still in an HTTP 200.
//! - **Client stream** (`StreamInput`): several request envelopes, one response message plus the
//!   end-stream envelope.
//! - `Connect-Timeout-Ms` carries the deadline; envd treats it on `Start` as the process lifetime.
//!
//! Anything that is not a Connect answer (an edge proxy's `502 {"code":502,…}`, an HTML page, a
//! 429 from a gateway) is returned as [`CallError::Http`], with the integer `code` of a JSON body
//! overriding the status, as the E2B SDK does.
//!
//! This is the only place in the crate that knows the framing.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use execseam_adapter_kit::http::{self, BodyError, Refusal};
use execseam_adapter_kit::retry::NoAnswer;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// `Content-Type` of unary calls.
pub(crate) const UNARY_CONTENT_TYPE: &str = "application/json";
/// `Content-Type` of streaming calls.
pub(crate) const STREAM_CONTENT_TYPE: &str = "application/connect+json";
/// Envelope flag: the payload is compressed (never negotiated here).
pub(crate) const FLAG_COMPRESSED: u8 = 0x01;
/// Envelope flag: the end-stream message.
pub(crate) const FLAG_END_STREAM: u8 = 0x02;
/// The largest envelope accepted: envd sends at most 32 KiB of output per message (base64 in
/// JSON), so anything near this is not envd.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;
/// The largest unary answer read (a process list, a file listing).
const MAX_UNARY_BODY: usize = 64 << 20;

/// The sixteen Connect codes, spelled as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// `canceled`
    Canceled,
    /// `unknown`
    Unknown,
    /// `invalid_argument`
    InvalidArgument,
    /// `deadline_exceeded`
    DeadlineExceeded,
    /// `not_found`
    NotFound,
    /// `already_exists`
    AlreadyExists,
    /// `permission_denied`
    PermissionDenied,
    /// `resource_exhausted`
    ResourceExhausted,
    /// `failed_precondition`
    FailedPrecondition,
    /// `aborted`
    Aborted,
    /// `out_of_range`
    OutOfRange,
    /// `unimplemented`
    Unimplemented,
    /// `internal`
    Internal,
    /// `unavailable`
    Unavailable,
    /// `data_loss`
    DataLoss,
    /// `unauthenticated`
    Unauthenticated,
}

impl Code {
    /// Every code, in number order.
    pub(crate) const ALL: [Code; 16] = [
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::OutOfRange => "out_of_range",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The gRPC status number (for [`WireStatus::Grpc`](execseam_core::WireStatus)).
    pub fn grpc(self) -> i32 {
        match self {
            Code::Canceled => 1,
            Code::Unknown => 2,
            Code::InvalidArgument => 3,
            Code::DeadlineExceeded => 4,
            Code::NotFound => 5,
            Code::AlreadyExists => 6,
            Code::PermissionDenied => 7,
            Code::ResourceExhausted => 8,
            Code::FailedPrecondition => 9,
            Code::Aborted => 10,
            Code::OutOfRange => 11,
            Code::Unimplemented => 12,
            Code::Internal => 13,
            Code::Unavailable => 14,
            Code::DataLoss => 15,
            Code::Unauthenticated => 16,
        }
    }
}

/// A Connect error as received: from a unary error body or an end-stream message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// The code.
    pub code: Code,
    /// The message (may be empty).
    pub message: String,
}

/// Why a call failed, before it is given a meaning by `error.rs`.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No connection could be made: nothing was sent.
    Connect(reqwest::Error),
    /// The client-side timeout fired.
    Timeout(reqwest::Error),
    /// The transport failed after the request may have been sent (reset, cut body).
    Transport(reqwest::Error),
    /// A non-Connect HTTP error answer (proxy, gateway, envd's plain HTTP routes).
    Http {
        /// The effective status: the integer `code` of a JSON body, else the HTTP status.
        status: u16,
        /// The answer is one of E2B's proxy templates (a JSON body with `sandboxId`:
        /// e2b-infra `packages/shared/pkg/proxy/template/*.go`, rendered by the proxy's
        /// handler before it forwards), so nothing reached envd. A bare status proves nothing:
        /// any gateway may forward and then answer 429 or 503 (issue 38).
        signed: bool,
        /// The message (`message` of a JSON body, else the body text).
        message: String,
        /// `Retry-After` in delta-seconds, if sent.
        retry_after: Option<Duration>,
    },
    /// A Connect error: a unary error body or an end-stream error.
    Rpc {
        /// The error.
        error: RpcError,
        /// The HTTP status it came with (200 for end-stream errors).
        http_status: u16,
        /// `Retry-After`, if sent.
        retry_after: Option<Duration>,
        /// True when it arrived in an end-stream message.
        in_stream: bool,
    },
    /// The answer broke the protocol.
    Protocol(String),
    /// A stream message did not complete within the idle timeout (a stalled or trickling
    /// answer; envd sends keepalives, so a live stream always completes one).
    Idle(Duration),
}

impl CallError {
    /// A reqwest failure, by the kit's classification (the URL names the sandbox and, for
    /// files, the path: it is never kept).
    pub(crate) fn from_reqwest(e: reqwest::Error) -> CallError {
        let e = e.without_url();
        match http::classify(&e) {
            NoAnswer::Connect => CallError::Connect(e),
            NoAnswer::Timeout => CallError::Timeout(e),
            _ if e.is_builder() => CallError::Protocol(format!("cannot build the request: {e}")),
            _ => CallError::Transport(e),
        }
    }
}

/// Encodes one envelope.
pub(crate) fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + payload.len());
    v.push(flags);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// One decoded envelope.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A message (flags 0).
    Message(Bytes),
    /// The end-stream message, parsed.
    End(Option<RpcError>),
}

/// An incremental envelope decoder.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// True when no partial envelope is buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next complete envelope, if one is buffered.
    pub(crate) fn next(&mut self) -> Result<Option<Frame>, String> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(format!(
                "an envelope of {len} bytes exceeds the {MAX_MESSAGE}-byte limit"
            ));
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err("a compressed envelope, but identity encoding was negotiated".into());
        }
        if flags & !(FLAG_COMPRESSED | FLAG_END_STREAM) != 0 {
            return Err(format!("unknown envelope flags {flags:#04x}"));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        self.buf.advance(5);
        let payload = self.buf.split_to(len).freeze();
        if flags & FLAG_END_STREAM != 0 {
            return parse_end_stream(&payload).map(|e| Some(Frame::End(e)));
        }
        Ok(Some(Frame::Message(payload)))
    }
}

/// Parses an end-stream message: `{"error"?: {...}, "metadata"?: {...}}`.
fn parse_end_stream(payload: &[u8]) -> Result<Option<RpcError>, String> {
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| format!("the end-stream message is not JSON: {e}"))?;
    let Some(obj) = v.as_object() else {
        return Err("the end-stream message is not a JSON object".into());
    };
    match obj.get("error") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(err) => rpc_error_of(err)
            .map(Some)
            .ok_or_else(|| format!("the end-stream error is not a Connect error: {err}")),
    }
}

/// A Connect error object: a string `code` that names a Connect code.
fn rpc_error_of(v: &serde_json::Value) -> Option<RpcError> {
    let code = Code::parse(v.get("code")?.as_str()?)?;
    let message = v
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or_default()
        .to_owned();
    Some(RpcError { code, message })
}

fn content_type(headers: &HeaderMap) -> String {
    http::content_type(headers)
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// How long an error answer's body may take when the request has no deadline of its own.
pub(crate) const ERROR_BODY_WITHIN: Duration = Duration::from_secs(30);

/// Turns a non-success answer into a [`CallError`]: a Connect error body (a JSON object whose
/// string `code` is a Connect code) or a plain HTTP error. The body is read as far as it is
/// quoted and for at most `within` (a stalled or trickling one ends there).
pub(crate) async fn error_of(resp: reqwest::Response, within: Duration) -> CallError {
    let r = Refusal::read(resp, within).await;
    let after = r.retry_after();
    error_of_parts(r.status, &r.headers, &r.body, after)
}

pub(crate) fn error_of_parts(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    retry_after: Option<Duration>,
) -> CallError {
    let json = if content_type(headers) == "application/json" {
        serde_json::from_slice::<serde_json::Value>(body).ok()
    } else {
        None
    };
    if let Some(v) = &json
        && let Some(error) = rpc_error_of(v)
    {
        return CallError::Rpc {
            error,
            http_status: status,
            retry_after,
            in_stream: false,
        };
    }
    let mut effective = status;
    let mut message = None;
    let mut signed = false;
    if let Some(obj) = json.as_ref().and_then(|v| v.as_object()) {
        signed = obj
            .get("sandboxId")
            .and_then(|v| v.as_str())
            .is_some_and(|id| !id.is_empty());
        if let Some(code) = obj.get("code").and_then(|c| c.as_u64())
            && let Ok(code) = u16::try_from(code)
        {
            effective = code;
        }
        message = obj
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_owned);
    }
    let message = message
        .or_else(|| execseam_adapter_kit::excerpt::excerpt(body, 512))
        .unwrap_or_else(|| format!("HTTP {status}"));
    CallError::Http {
        status: effective,
        signed,
        message,
        retry_after,
    }
}

/// A Connect call's `POST`: `content_type` with the encoding headers that go with it (HTTP's
/// own for a unary call, `connect-*` for a stream), the request bounded by `deadline`, and
/// `timeout` sent as `Connect-Timeout-Ms`.
fn post(
    http: &reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    content_type: &'static str,
    body: impl Into<reqwest::Body>,
    deadline: Option<Duration>,
    timeout: Option<Duration>,
) -> reqwest::RequestBuilder {
    let (accept, content) = if content_type == UNARY_CONTENT_TYPE {
        ("accept-encoding", "content-encoding")
    } else {
        ("connect-accept-encoding", "connect-content-encoding")
    };
    let mut req = http
        .post(url)
        .headers(headers)
        .header(CONTENT_TYPE, content_type)
        .header("connect-protocol-version", "1")
        .header(accept, "identity")
        .header(content, "identity")
        .body(body);
    if let Some(t) = deadline {
        req = req.timeout(t);
    }
    if let Some(v) = timeout_header(timeout) {
        req = req.header("connect-timeout-ms", v);
    }
    req
}

fn timeout_header(timeout: Option<Duration>) -> Option<HeaderValue> {
    let ms = timeout?.as_millis().clamp(1, 9_999_999_999);
    HeaderValue::from_str(&ms.to_string()).ok()
}

/// Calls a unary method.
pub(crate) async fn unary<Req: Serialize, Resp: DeserializeOwned>(
    http: &reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    request: &Req,
    timeout: Option<Duration>,
) -> Result<Resp, CallError> {
    let body = serde_json::to_vec(request)
        .map_err(|e| CallError::Protocol(format!("cannot encode the request: {e}")))?;
    let req = post(
        http,
        url,
        headers,
        UNARY_CONTENT_TYPE,
        body,
        timeout,
        timeout,
    );
    let resp = req.send().await.map_err(CallError::from_reqwest)?;
    if resp.status().as_u16() != 200 {
        return Err(error_of(resp, timeout.unwrap_or(ERROR_BODY_WITHIN)).await);
    }
    if content_type(resp.headers()) != UNARY_CONTENT_TYPE {
        let ct = content_type(resp.headers());
        return Err(CallError::Protocol(format!(
            "a unary answer with Content-Type {ct:?}, want {UNARY_CONTENT_TYPE}"
        )));
    }
    read_json(
        resp,
        MAX_UNARY_BODY,
        timeout.unwrap_or(Duration::MAX),
        "a unary answer",
    )
    .await
}

/// Reads a JSON answer (`what`, in errors) of at most `limit` bytes within `within`: a larger one
/// is `Protocol`, a stall `Idle`, one that is not the JSON of `T` `Protocol` quoting its start.
pub(crate) async fn read_json<T: DeserializeOwned>(
    resp: reqwest::Response,
    limit: usize,
    within: Duration,
    what: &str,
) -> Result<T, CallError> {
    let body = http::read_body(resp, limit, within)
        .await
        .map_err(|e| match e {
            BodyError::Transport(e) => CallError::from_reqwest(e),
            BodyError::TooLarge { limit } => {
                CallError::Protocol(format!("{what} longer than {limit} bytes"))
            }
            BodyError::Deadline(d) => CallError::Idle(d),
        })?;
    serde_json::from_slice(&body).map_err(|e| {
        CallError::Protocol(format!(
            "a malformed answer ({e}): {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    })
}

/// Opens a server stream. `timeout` is sent as `Connect-Timeout-Ms` only: the stream lasts as
/// long as the server says, but each message must complete within `idle` (envd's keepalives
/// come every `Keepalive-Ping-Interval`).
pub(crate) async fn server_stream<Req: Serialize>(
    http: &reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    request: &Req,
    timeout: Option<Duration>,
    idle: Duration,
) -> Result<ServerStream, CallError> {
    let payload = serde_json::to_vec(request)
        .map_err(|e| CallError::Protocol(format!("cannot encode the request: {e}")))?;
    let body = envelope(0, &payload);
    let req = post(http, url, headers, STREAM_CONTENT_TYPE, body, None, timeout);
    let resp = match tokio::time::timeout(idle, req.send()).await {
        Ok(r) => r.map_err(CallError::from_reqwest)?,
        Err(_) => return Err(CallError::Idle(idle)),
    };
    stream_of(resp, Some(idle)).await
}

async fn stream_of(
    resp: reqwest::Response,
    idle: Option<Duration>,
) -> Result<ServerStream, CallError> {
    let within = idle.unwrap_or(ERROR_BODY_WITHIN);
    if resp.status().as_u16() != 200 {
        return Err(error_of(resp, within).await);
    }
    let ct = content_type(resp.headers());
    if ct != STREAM_CONTENT_TYPE {
        // A JSON error body with a 200 is still an error answer, not a stream.
        let r = Refusal::read(resp, within).await;
        let (headers, body) = (r.headers, r.body);
        if let CallError::Rpc { error, .. } = error_of_parts(200, &headers, &body, None) {
            return Err(CallError::Rpc {
                error,
                http_status: 200,
                retry_after: None,
                in_stream: false,
            });
        }
        return Err(CallError::Protocol(format!(
            "a streaming answer with Content-Type {ct:?}, want {STREAM_CONTENT_TYPE}"
        )));
    }
    Ok(ServerStream {
        resp,
        decoder: Decoder::default(),
        finished: false,
        idle,
        since: tokio::time::Instant::now(),
    })
}

/// The response side of a server stream.
#[derive(Debug)]
pub(crate) struct ServerStream {
    resp: reqwest::Response,
    decoder: Decoder,
    finished: bool,
    /// The longest wait for one complete message, if bounded.
    idle: Option<Duration>,
    /// When the caller asked for the message being read.
    since: tokio::time::Instant,
}

impl ServerStream {
    /// The next message; `Ok(None)` after a successful end-stream. An end-stream error is
    /// [`CallError::Rpc`] with `in_stream`; a body that ends without the end-stream message is
    /// [`CallError::Protocol`]. Cancel-safe: nothing is lost if the future is dropped.
    pub(crate) async fn message<T: DeserializeOwned>(&mut self) -> Result<Option<T>, CallError> {
        self.since = tokio::time::Instant::now();
        loop {
            if self.finished {
                return Ok(None);
            }
            match self.decoder.next().map_err(CallError::Protocol)? {
                Some(Frame::Message(payload)) => {
                    return serde_json::from_slice(&payload).map(Some).map_err(|e| {
                        CallError::Protocol(format!(
                            "a malformed stream message ({e}): {}",
                            String::from_utf8_lossy(&payload[..payload.len().min(200)])
                        ))
                    });
                }
                Some(Frame::End(error)) => {
                    self.finished = true;
                    if !self.decoder.is_empty() {
                        return Err(CallError::Protocol(
                            "bytes after the end-stream message".into(),
                        ));
                    }
                    return match error {
                        None => Ok(None),
                        Some(error) => Err(CallError::Rpc {
                            error,
                            http_status: 200,
                            retry_after: None,
                            in_stream: true,
                        }),
                    };
                }
                None => {}
            }
            let chunk = match self.idle {
                Some(idle) => {
                    // Bounded per message, not per byte: a trickle never completes one.
                    match tokio::time::timeout_at(self.since + idle, self.resp.chunk()).await {
                        Ok(c) => c,
                        Err(_) => {
                            self.finished = true;
                            return Err(CallError::Idle(idle));
                        }
                    }
                }
                None => self.resp.chunk().await,
            };
            match chunk.map_err(CallError::from_reqwest)? {
                Some(chunk) => self.decoder.push(&chunk),
                None => {
                    self.finished = true;
                    return Err(CallError::Protocol(if self.decoder.is_empty() {
                        "the stream ended without its end-stream message".into()
                    } else {
                        "the stream ended inside an envelope".into()
                    }));
                }
            }
        }
    }
}

/// Calls a client-streaming method; returns the one response message. The messages are
/// encoded as the body is sent, one at a time: what is held is the message being sent, not
/// the request (stdin of hundreds of megabytes goes through here).
pub(crate) async fn client_stream<Req, Resp>(
    http: &reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    requests: impl Iterator<Item = Req> + Send + 'static,
    timeout: Option<Duration>,
) -> Result<Resp, CallError>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(requests.map(|r| {
        serde_json::to_vec(&r)
            .map(|payload| Bytes::from(envelope(0, &payload)))
            .map_err(|e| std::io::Error::other(format!("cannot encode the request: {e}")))
    })));
    let req = post(
        http,
        url,
        headers,
        STREAM_CONTENT_TYPE,
        body,
        timeout,
        timeout,
    );
    let resp = req.send().await.map_err(CallError::from_reqwest)?;
    let mut stream = stream_of(resp, None).await?;
    let Some(msg) = stream.message::<Resp>().await? else {
        return Err(CallError::Protocol(
            "a client stream ended without its response message".into(),
        ));
    };
    match stream.message::<serde_json::Value>().await? {
        None => Ok(msg),
        Some(extra) => Err(CallError::Protocol(format!(
            "a second response message on a client stream: {extra}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// D5 (issue 38): a client stream's messages are encoded as the body is sent. A server
    /// that reads 1 MiB and answers gets a few dozen of 2,000 messages of 64 KiB encoded;
    /// the code before encoded every message, and the whole body, before sending.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_client_stream_encodes_its_messages_as_it_sends_them() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url =
            reqwest::Url::parse(&format!("http://{}/s", listener.local_addr().unwrap())).unwrap();
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 64 << 10];
            let mut read = 0;
            while read < 1 << 20 {
                read += sock.read(&mut buf).await.unwrap();
            }
            let mut body = envelope(0, b"{}");
            body.extend(envelope(FLAG_END_STREAM, b"{}"));
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {STREAM_CONTENT_TYPE}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            sock.write_all(head.as_bytes()).await.unwrap();
            sock.write_all(&body).await.unwrap();
        });
        let made = Arc::new(AtomicUsize::new(0));
        let counted = made.clone();
        let piece = "A".repeat(64 << 10);
        let messages = (0..2_000).map(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            serde_json::json!({"data": {"input": {"stdin": piece}}})
        });
        let http = http::client(
            "e2b",
            http::ClientOptions::new(Duration::from_secs(5)).http1_only(),
        )
        .unwrap();
        let call =
            client_stream::<_, serde_json::Value>(&http, url, HeaderMap::new(), messages, None);
        // The answer, or a write cut by the server's close: either way the call ends.
        let _ = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the call did not end");
        server.await.unwrap();
        let made = made.load(Ordering::SeqCst);
        assert!(made < 500, "{made} of 2000 messages encoded");
    }

    #[test]
    fn envelopes_round_trip_across_chunk_boundaries() {
        let mut wire = envelope(0, br#"{"event":{"start":{"pid":412}}}"#);
        wire.extend(envelope(0, br#"{"event":{"data":{"stdout":"aGkK"}}}"#));
        wire.extend(envelope(FLAG_END_STREAM, b"{}"));
        // Byte by byte: a decoder must never yield a partial envelope.
        let mut d = Decoder::default();
        let mut frames = Vec::new();
        for b in &wire {
            d.push(std::slice::from_ref(b));
            while let Some(f) = d.next().unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(
            frames,
            vec![
                Frame::Message(Bytes::from_static(br#"{"event":{"start":{"pid":412}}}"#)),
                Frame::Message(Bytes::from_static(
                    br#"{"event":{"data":{"stdout":"aGkK"}}}"#
                )),
                Frame::End(None),
            ]
        );
        assert!(d.is_empty());
    }

    #[test]
    fn the_captured_request_prefix_matches() {
        // From the research capture: `00 00 00 00 4a` + 74 bytes of JSON.
        let payload =
            br#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}"#;
        assert_eq!(payload.len(), 0x4a);
        assert_eq!(&envelope(0, payload)[..5], &[0, 0, 0, 0, 0x4a]);
    }

    #[test]
    fn end_stream_errors_are_parsed() {
        let mut d = Decoder::default();
        d.push(&envelope(
            FLAG_END_STREAM,
            br#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#,
        ));
        assert_eq!(
            d.next().unwrap(),
            Some(Frame::End(Some(RpcError {
                code: Code::DeadlineExceeded,
                message: "context deadline exceeded".into()
            })))
        );
        let mut d = Decoder::default();
        d.push(&envelope(
            FLAG_END_STREAM,
            br#"{"error":{"code":"nonsense"}}"#,
        ));
        assert!(d.next().is_err());
        let mut d = Decoder::default();
        d.push(&envelope(
            FLAG_END_STREAM,
            b"{\"metadata\":{\"a\":[\"b\"]}}",
        ));
        assert_eq!(d.next().unwrap(), Some(Frame::End(None)));
    }

    #[test]
    fn compressed_oversized_and_unknown_flags_are_rejected() {
        for wire in [
            envelope(FLAG_COMPRESSED, b"x"),
            envelope(0x80, b"x"),
            vec![0, 0xff, 0xff, 0xff, 0xff],
        ] {
            let mut d = Decoder::default();
            d.push(&wire);
            assert!(d.next().is_err(), "{wire:?}");
        }
    }

    #[test]
    fn error_bodies_are_told_apart() {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        // A Connect error: a string code.
        match error_of_parts(
            404,
            &h,
            br#"{"code":"not_found","message":"file not found"}"#,
            None,
        ) {
            CallError::Rpc {
                error, http_status, ..
            } => {
                assert_eq!(error.code, Code::NotFound);
                assert_eq!(http_status, 404);
            }
            other => panic!("{other:?}"),
        }
        // The edge proxy: an integer code, which overrides the status.
        let mut h2 = HeaderMap::new();
        h2.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        match error_of_parts(
            200,
            &h2,
            br#"{"sandboxId":"x","message":"The sandbox was not found","code":502}"#,
            None,
        ) {
            CallError::Http {
                status, message, ..
            } => {
                assert_eq!(status, 502);
                assert_eq!(message, "The sandbox was not found");
            }
            other => panic!("{other:?}"),
        }
        // An unknown string code is not a Connect error.
        match error_of_parts(500, &h, br#"{"code":"weird","message":"m"}"#, None) {
            CallError::Http {
                status: 500,
                signed: false,
                message,
                ..
            } => assert_eq!(message, "m"),
            other => panic!("{other:?}"),
        }
        // HTML from a gateway.
        match error_of_parts(503, &HeaderMap::new(), b"<html>busy</html>", None) {
            CallError::Http {
                status: 503,
                signed: false,
                message,
                ..
            } => assert!(message.contains("busy")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn codes_round_trip() {
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(c));
        }
        assert_eq!(Code::parse("NOT_FOUND"), None);
    }
}
