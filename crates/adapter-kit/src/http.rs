//! The HTTP plumbing every reqwest adapter shares, written once: the client ([`client`]: rustls
//! with ring, no hidden retries, no redirects, timeouts from the configuration), the one
//! classification of a `reqwest::Error` ([`classify`], refined through the hyper and I/O source
//! chain as object_store's `HttpError::reqwest` does) and the error it becomes
//! ([`transport_error`]), `Retry-After` ([`retry_after`]), and bodies read bounded in size **and**
//! in total time ([`read_body`], [`read_error_body`]): a trickling or stalled answer ends on its
//! deadline, not on a per-read timer that every byte resets.

use std::error::Error as StdError;
use std::io;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use execseam_core::{Error, ErrorKind};
use reqwest::header::HeaderMap;

use crate::retry::{self, Call, NoAnswer};
use crate::text;

/// How the client is built. Every adapter's client refuses redirects (a redirected POST could
/// be sent twice) and never retries by itself (an exec is never re-sent behind the caller's
/// back).
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The TCP (and TLS) connect timeout.
    pub connect_timeout: Duration,
    /// A timer on each read (the headers, every body chunk), reset by every byte; `None`: none
    /// (bound whole answers with [`read_body`]'s deadline instead).
    pub read_timeout: Option<Duration>,
    /// HTTP/1.1 only (for a client whose connections become WebSockets).
    pub http1_only: bool,
    /// Headers on every request.
    pub default_headers: HeaderMap,
    /// The `User-Agent` (default `execseam-<provider>/<version>`).
    pub user_agent: Option<String>,
}

impl ClientOptions {
    /// Connect within `connect_timeout`; nothing else set.
    pub fn new(connect_timeout: Duration) -> ClientOptions {
        ClientOptions {
            connect_timeout,
            read_timeout: None,
            http1_only: false,
            default_headers: HeaderMap::new(),
            user_agent: None,
        }
    }

    /// With a per-read timer.
    #[must_use]
    pub fn read_timeout(mut self, timeout: Duration) -> ClientOptions {
        self.read_timeout = Some(timeout);
        self
    }

    /// HTTP/1.1 only.
    #[must_use]
    pub fn http1_only(mut self) -> ClientOptions {
        self.http1_only = true;
        self
    }

    /// With these headers on every request.
    #[must_use]
    pub fn default_headers(mut self, headers: HeaderMap) -> ClientOptions {
        self.default_headers = headers;
        self
    }

    /// With this `User-Agent`.
    #[must_use]
    pub fn user_agent(mut self, agent: impl Into<String>) -> ClientOptions {
        self.user_agent = Some(agent.into());
        self
    }
}

/// The client of `provider` (rustls with ring and the system's roots; no redirects, no retries).
/// A failure to build it is [`ErrorKind::Internal`].
pub fn client(provider: &'static str, options: ClientOptions) -> Result<reqwest::Client, Error> {
    // Every adapter uses ring; installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(options.default_headers)
        .user_agent(
            options
                .user_agent
                .unwrap_or_else(|| format!("execseam-{provider}/{}", env!("CARGO_PKG_VERSION"))),
        );
    if let Some(t) = options.read_timeout {
        b = b.read_timeout(t);
    }
    if options.http1_only {
        b = b.http1_only();
    }
    b.build().map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot build the HTTP client: {e}"),
        )
        .with_provider(provider)
        .with_operation("config")
    })
}

/// How far a failed reqwest request got. Connect failures (a connect timeout too) sent
/// nothing; our own timers are [`NoAnswer::Timeout`]; a connection closed, reset or cut while
/// the request or the answer was in flight is [`NoAnswer::Cut`] (the body of an answer included:
/// reqwest reports a cut body as a "decode" error, which it is not); only an answer that could
/// not be decoded (JSON) is [`NoAnswer::Malformed`].
pub fn classify(e: &reqwest::Error) -> NoAnswer {
    if e.is_connect() {
        return NoAnswer::Connect;
    }
    if e.is_timeout() {
        return NoAnswer::Timeout;
    }
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                return NoAnswer::Timeout;
            }
            if h.is_incomplete_message()
                || h.is_closed()
                || h.is_canceled()
                || h.is_body_write_aborted()
            {
                return NoAnswer::Cut;
            }
        }
        if let Some(io) = s.downcast_ref::<io::Error>() {
            match io.kind() {
                io::ErrorKind::TimedOut => return NoAnswer::Timeout,
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::Interrupted => return NoAnswer::Cut,
                _ => {}
            }
        }
        if s.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_body)
        {
            return NoAnswer::Cut;
        }
        source = s.source();
    }
    if e.is_body() {
        NoAnswer::Cut
    } else if e.is_decode() {
        NoAnswer::Malformed
    } else {
        NoAnswer::Other
    }
}

/// A reqwest failure of `call`: kind and retry class from [`classify`] and
/// [`retry::no_answer`], a one-line message without URLs (they can carry sandbox ids, paths,
/// argv), the error as the source.
pub fn transport_error(call: Call, e: reqwest::Error) -> Error {
    let e = e.without_url();
    let what = classify(&e);
    no_answer_of(call, what, e)
}

fn no_answer_of(call: Call, what: NoAnswer, e: reqwest::Error) -> Error {
    call.no_answer(
        what,
        format!("{}: {}", what.describe(), text::error_chain(&e)),
    )
    .with_source(e)
}

/// The `Retry-After` of an answer (seconds, fractional seconds or an HTTP-date), if any.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    retry::parse_retry_after(v, SystemTime::now())
}

/// The `Content-Type` of an answer as sent (parameters included), `""` if none or not text.
pub fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum BodyError {
    /// It is larger than the limit (what was read is dropped).
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// It did not end within the deadline (a stalled or trickling answer).
    Deadline(Duration),
    /// The connection broke or a read failed.
    Transport(reqwest::Error),
}

impl BodyError {
    /// The error of `call`: a body too large is [`ErrorKind::OutputLimit`] (`Never` before
    /// the submit: repeating gets the same answer; `Unsafe` from it on), one past its deadline
    /// [`ErrorKind::Timeout`] of the request, a broken read as [`transport_error`] (at least
    /// [`NoAnswer::Cut`]: the answer had begun).
    pub fn into_error(self, call: Call) -> Error {
        match self {
            BodyError::TooLarge { limit } => call.body_too_large(limit),
            BodyError::Deadline(d) => call.body_too_late(d),
            BodyError::Transport(e) => {
                let e = e.without_url();
                let what = match classify(&e) {
                    NoAnswer::Connect | NoAnswer::Other | NoAnswer::Malformed => NoAnswer::Cut,
                    other => other,
                };
                no_answer_of(call, what, e)
            }
        }
    }
}

/// Reads `resp`'s whole body: at most `limit` bytes, ended by `within` from now (a total
/// bound: a body that trickles one byte at a time still ends on it).
pub async fn read_body(
    resp: reqwest::Response,
    limit: usize,
    within: Duration,
) -> Result<Bytes, BodyError> {
    let mut body = BytesMut::new();
    feed_body(resp, within, |chunk| {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        body.extend_from_slice(chunk);
        Ok(())
    })
    .await?;
    Ok(body.freeze())
}

/// Reads `resp`'s body piece by piece into `feed`, ended by `within` from now: for an answer
/// decoded as it arrives rather than held whole (`feed` bounds what it keeps; its error ends
/// the read; the body's own failures come as `E` from [`BodyError`]).
pub async fn feed_body<E: From<BodyError>>(
    resp: reqwest::Response,
    within: Duration,
    mut feed: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let mut resp = resp;
    let read = async {
        while let Some(chunk) = resp.chunk().await.map_err(BodyError::Transport)? {
            feed(&chunk)?;
        }
        Ok(())
    };
    match tokio::time::timeout(within, read).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::Deadline(within).into()),
    }
}

/// The most of an error answer read to quote it ([`read_error_body`]).
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// Reads the start of an error answer to quote it: at most `limit` bytes, within `within`.
/// Never fails: what came before a cut, a stall or the limit is what is quoted (the status
/// already says what went wrong).
pub async fn read_error_body(resp: reqwest::Response, limit: usize, within: Duration) -> Bytes {
    let mut resp = resp;
    let mut body = BytesMut::new();
    let read = async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            let room = limit.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= limit {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    body.freeze()
}

/// An answer that is not a success, read for mapping: its status, headers and the start of its
/// body ([`read_error_body`]).
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The status.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// At most the limit of the body.
    pub body: Bytes,
}

impl Refusal {
    /// Reads `resp` as a refusal (at most [`MAX_ERROR_BODY`], within `within`).
    pub async fn read(resp: reqwest::Response, within: Duration) -> Refusal {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = read_error_body(resp, MAX_ERROR_BODY, within).await;
        Refusal {
            status,
            headers,
            body,
        }
    }

    /// The `Retry-After`, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        retry_after(&self.headers)
    }

    /// The body as text for a message (bounded, escaped).
    pub fn quote(&self, max: usize) -> String {
        text::quote_body(&self.body, max)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use execseam_core::{Deadline, Retry};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::retry::Stage;

    /// A server that answers every connection with `head`, then `body` in `pieces` pieces
    /// `gap` apart, then closes (or keeps the connection open when `hold`).
    async fn serve(
        head: &'static str,
        body: Vec<u8>,
        pieces: usize,
        gap: Duration,
        hold: bool,
    ) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(head.as_bytes()).await;
                    let step = body.len().div_ceil(pieces.max(1)).max(1);
                    for piece in body.chunks(step) {
                        let _ = s.write_all(piece).await;
                        let _ = s.flush().await;
                        tokio::time::sleep(gap).await;
                    }
                    if hold {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                });
            }
        });
        url
    }

    fn http() -> reqwest::Client {
        client("test", ClientOptions::new(Duration::from_secs(2))).unwrap()
    }

    #[tokio::test]
    async fn a_trickling_body_ends_on_the_total_deadline() {
        // 200 bytes, one every 20 ms, would take 4 s; every read comes well within 1 s.
        let url = serve(
            "HTTP/1.1 200 OK\r\ncontent-length: 200\r\n\r\n",
            vec![b'x'; 200],
            200,
            Duration::from_millis(20),
            false,
        )
        .await;
        let resp = http().get(&url).send().await.unwrap();
        let start = Instant::now();
        let e = read_body(resp, 1 << 20, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, BodyError::Deadline(_)), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(2));
        let e = e.into_error(Call::new("test", "exec", Stage::Submit));
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Timeout(Deadline::Request), Retry::Unsafe)
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_and_an_error_body_is_cut_to_it() {
        let url = serve(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 5000\r\nretry-after: 3\r\n\r\n",
            vec![b'y'; 5000],
            5,
            Duration::from_millis(1),
            false,
        )
        .await;
        let resp = http().get(&url).send().await.unwrap();
        let e = read_body(resp, 1000, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, BodyError::TooLarge { limit: 1000 }), "{e:?}");
        let resp = http().get(&url).send().await.unwrap();
        let r = Refusal::read(resp, Duration::from_secs(5)).await;
        assert_eq!((r.status, r.body.len()), (503, 5000));
        assert_eq!(r.retry_after(), Some(Duration::from_secs(3)));
        let resp = http().get(&url).send().await.unwrap();
        assert_eq!(
            read_error_body(resp, 10, Duration::from_secs(5))
                .await
                .len(),
            10
        );
    }

    #[tokio::test]
    async fn a_stalled_error_body_is_quoted_as_far_as_it_came() {
        let url = serve(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 100\r\n\r\n",
            b"partial".to_vec(),
            1,
            Duration::ZERO,
            true,
        )
        .await;
        let resp = http().get(&url).send().await.unwrap();
        let start = Instant::now();
        let r = Refusal::read(resp, Duration::from_millis(300)).await;
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(&r.body[..], b"partial");
    }

    #[tokio::test]
    async fn a_cut_body_is_cut_not_malformed() {
        // The server promises 100 bytes, sends 7 and closes.
        let url = serve(
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n",
            b"partial".to_vec(),
            1,
            Duration::ZERO,
            false,
        )
        .await;
        let resp = http().get(&url).send().await.unwrap();
        let e = read_body(resp, 1 << 20, Duration::from_secs(5))
            .await
            .unwrap_err();
        let BodyError::Transport(re) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(classify(re), NoAnswer::Cut, "{re:?}");
        let e = e.into_error(Call::new("test", "exec", Stage::Submit));
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
    }

    #[tokio::test]
    async fn connect_failures_sent_nothing_and_urls_stay_out() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/sandbox/secret-id?argv=x",
            l.local_addr().unwrap()
        );
        drop(l);
        let e = http().get(&url).send().await.unwrap_err();
        assert_eq!(classify(&e), NoAnswer::Connect);
        let e = transport_error(Call::new("test", "exec", Stage::Submit), e);
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE));
        assert!(!e.to_string().contains("secret-id"), "{e}");
    }

    #[tokio::test]
    async fn malformed_json_is_malformed() {
        let url = serve(
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: application/json\r\n\r\n",
            b"{nope".to_vec(),
            1,
            Duration::ZERO,
            false,
        )
        .await;
        let resp = http().get(&url).send().await.unwrap();
        let e = resp.json::<serde_json::Value>().await.unwrap_err();
        assert_eq!(classify(&e), NoAnswer::Malformed, "{e:?}");
    }

    #[test]
    fn the_client_refuses_redirects_and_names_the_provider() {
        let e = client(
            "p",
            ClientOptions::new(Duration::from_secs(1)).user_agent("bad\nagent"),
        )
        .unwrap_err();
        assert_eq!((e.kind(), e.provider()), (ErrorKind::Internal, "p"));
    }
}
