#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! A tampering proxy for HTTP/1.1, HTTP/2 (h2c, so gRPC) and WebSocket, in front of any emulator
//! or plain-HTTP endpoint: `execseam chaos --upstream URL --rule RULE…`, `execseam emulate
//! <provider> --chaos RULE…`, or [`ChaosProxy::start`] in a test.
//!
//! Every request is matched against the rules, in order; each rule counts the requests its
//! method and path match, and the first rule whose count selects this request fires. Rules
//! apply to every route, so the requests an adapter makes after it submitted a command (its log
//! follow, status polls, the kill) are as exposed as the submit itself.
//!
//! # Rule grammar
//!
//! ```text
//! RULES  := RULE (';' RULE)*
//! RULE   := [METHOD ' '] PATH ['#' NTH] '=' ACTION
//! METHOD := GET | POST | PUT | DELETE | PATCH | HEAD | OPTIONS | CONNECT | TRACE | *
//! PATH   := * | /glob      ('*' in a glob matches any run of characters, '/' included;
//!                           the query string is not part of the path)
//! NTH    := N (the Nth matching request only) | N+ (the Nth and later) | N-M | *   (default *)
//! ACTION := HEAD ['+' BODY] | BODY | OTHER
//! HEAD   := status:CODE[:SECS]  answer CODE (with Retry-After: SECS) without forwarding; the
//!                               body {"message":"chaos: injected CODE","code":CODE}
//!         | status-after:CODE[:SECS]
//!                               forward (the service runs it), answer CODE (and Retry-After)
//!                               with that body instead of its answer
//!         | head:CODE:TYPE      forward; answer CODE with Content-Type TYPE, the upstream's
//!                               other headers and its body (a 200 of the wrong type)
//! OTHER  := hold:MS             forward; buffer the whole answer (at most 128 MiB), send it MS
//!                               later; hold:0 never sends it (an answer in flight when the
//!                               client is interrupted: the service did the work)
//!         | reset               close the connection (HTTP/2: reset the stream), not forwarded
//!         | reset-after         forward, then close/reset instead of answering
//!         | delay:MS            wait, then forward normally
//!         | hang                never answer, never forward
//! BODY   := stall               forward; the upstream's status and headers, then no body byte
//!         | trickle:MS[:BYTES]  forward; the body BYTES (default 1) at a time, every MS
//!         | endless             forward; the upstream's headers, then endless 'x' (no newline)
//!         | truncate:BYTES      forward; the first BYTES of the body, then a cut
//!         | rechunk:BYTES       forward; the body re-cut into BYTES-sized pieces (small
//!                               pieces are merged, big ones split; legal, the answer is the same)
//!         | drop-last           forward; drop the body's final piece and trailers, end cleanly
//!         | garbage[:BYTES]     forward; the upstream's headers, then BYTES (default 4096)
//!                               pseudo-random bytes instead of the body
//!         | body:TEXT           forward; the upstream's headers, then TEXT instead of the body
//!                               (`body:{}`: well-formed, and empty)
//! ```
//!
//! `HEAD+BODY` applies the body action to the head action's body: the injected JSON for
//! `status` and `status-after` (`status:503+stall`: an error whose body never comes;
//! `status-after:503+trickle:5000`), the upstream's body for `head`
//! (`head:200:text/plain+stall`: a success of the wrong type, then silence).
//!
//! Examples: `POST /process.Process/Start#1=status:429:86400`, `*#2=reset`, `GET
//! /toolbox/*/logs=stall`, `*=rechunk:1`, `POST /v2/sandboxes#1=hold:0`,
//! `*#1=status-after:429:86400`. An unknown action, method or malformed count is an error when
//! the rules are parsed, before the proxy starts.
//!
//! On a WebSocket (an HTTP/1.1 upgrade answered 101) the body actions apply to the bytes the
//! server sends after the upgrade: `drop-last` drops the last data frame before the server's
//! close frame, `endless` sends one frame announcing 2^40 bytes then endless `x`, `truncate`
//! cuts the connection after BYTES. The client's bytes are passed through untouched.
//!
//! Upstreams are `http://host:port` (the emulators, or a plain-HTTP endpoint); TLS to the
//! upstream is not implemented.
#![warn(missing_docs)]

mod rules;
mod ws;

use std::convert::Infallible;
use std::error::Error as StdError;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use rules::{ACTIONS, Action, Nth, Rule, parse_rules};

type BoxError = Box<dyn StdError + Send + Sync>;

/// How many requests [`ChaosProxy::requests`] keeps (the oldest are forgotten): a proxy in front
/// of a long-running agent must not grow without bound.
pub const SEEN_LIMIT: usize = 65_536;
type ChaosBody = UnsyncBoxBody<Bytes, BoxError>;

/// One request the proxy saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path (no query).
    pub path: String,
    /// The action a rule fired, if one did.
    pub fired: Option<Action>,
}

struct State {
    upstream: String,
    rules: Mutex<Vec<(Rule, u64)>>,
    /// The most recent [`SEEN_LIMIT`] requests.
    seen: Mutex<std::collections::VecDeque<Seen>>,
    /// Every request a rule fired on, for [`ChaosProxy::subscribe`].
    fired: tokio::sync::broadcast::Sender<Seen>,
    /// Answers whose body (or post-upgrade bytes) a rule's action began to tamper with: the
    /// upstream answered, and the client got the head.
    tampered: AtomicU64,
    /// Body and WebSocket pumps, aborted when the proxy stops.
    pumps: Mutex<JoinSet<()>>,
}

impl State {
    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        let mut pumps = self.pumps.lock().expect("chaos pumps");
        while pumps.try_join_next().is_some() {}
        pumps.spawn(f);
    }
}

impl State {
    /// Counts the request against every rule that matches it and returns the first firing
    /// action.
    fn fire(&self, method: &str, path: &str) -> Option<Action> {
        let fired = self.fire_inner(method, path);
        let seen = Seen {
            method: method.to_owned(),
            path: path.to_owned(),
            fired: fired.clone(),
        };
        if let Some(a) = &fired {
            tracing::debug!(method, path, action = %a, "chaos rule fired");
            // No subscriber is fine.
            let _ = self.fired.send(seen.clone());
        }
        let mut log = self.seen.lock().expect("chaos log");
        if log.len() == SEEN_LIMIT {
            log.pop_front();
        }
        log.push_back(seen);
        fired
    }

    fn fire_inner(&self, method: &str, path: &str) -> Option<Action> {
        let mut rules = self.rules.lock().expect("chaos rules");
        let mut fired = None;
        for (rule, count) in rules.iter_mut() {
            if rule.matches(method, path) {
                *count += 1;
                if fired.is_none() && rule.fires_on(*count) {
                    fired = Some(rule.action.clone());
                }
            }
        }
        fired
    }
}

/// A running chaos proxy. Dropping it (or [`ChaosProxy::shutdown`]) stops it and closes every
/// connection.
pub struct ChaosProxy {
    addr: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for ChaosProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.state.upstream)
            .finish_non_exhaustive()
    }
}

/// The `host:port` of an `http://host:port[/]` upstream.
fn upstream_authority(upstream: &str) -> io::Result<String> {
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad upstream {upstream:?}: {why}"),
        )
    };
    let rest = upstream
        .strip_prefix("http://")
        .ok_or_else(|| bad("want http://host:port (TLS upstreams are not supported)"))?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
        return Err(bad("want http://host:port with no path"));
    }
    Ok(authority.to_owned())
}

impl ChaosProxy {
    /// Listens on `listen` and forwards to `upstream` (`http://host:port`), applying `rules`.
    pub async fn start(
        listen: SocketAddr,
        upstream: &str,
        rules: Vec<Rule>,
    ) -> io::Result<ChaosProxy> {
        let state = Arc::new(State {
            upstream: upstream_authority(upstream)?,
            rules: Mutex::new(rules.into_iter().map(|r| (r, 0)).collect()),
            seen: Mutex::new(std::collections::VecDeque::new()),
            fired: tokio::sync::broadcast::channel(1024).0,
            tampered: AtomicU64::new(0),
            pumps: Mutex::new(JoinSet::new()),
        });
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, state.clone(), stopped));
        tracing::debug!(%addr, upstream, "chaos proxy listening");
        Ok(ChaosProxy {
            addr,
            state,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the rules; counts start again from zero.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        *self.state.rules.lock().expect("chaos rules") =
            rules.into_iter().map(|r| (r, 0)).collect();
    }

    /// Every request seen so far (the most recent [`SEEN_LIMIT`]), in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.state
            .seen
            .lock()
            .expect("chaos log")
            .iter()
            .cloned()
            .collect()
    }

    /// The requests a rule fires on from now on, as they arrive (a subscriber that falls more
    /// than 1024 behind misses the oldest, `RecvError::Lagged`).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Seen> {
        self.state.fired.subscribe()
    }

    /// Forgets the requests seen so far (and the count of [`tampered`](Self::tampered)).
    pub fn clear_requests(&self) {
        self.state.seen.lock().expect("chaos log").clear();
        self.state.tampered.store(0, Ordering::SeqCst);
    }

    /// How many answers a body action (`endless`, `garbage`, `trickle`, ...) began to tamper
    /// with since the last [`clear_requests`](Self::clear_requests): the upstream answered and
    /// its head reached the client. Zero means a client's timeout fired before any tampered
    /// byte was sent (the upstream was slow to answer).
    pub fn tampered(&self) -> u64 {
        self.state.tampered.load(Ordering::SeqCst)
    }

    /// Stops accepting and closes every connection.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.state.pumps.lock().expect("chaos pumps").abort_all();
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Ok(mut pumps) = self.state.pumps.lock() {
            pumps.abort_all();
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stopped: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, state.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "chaos accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// The upstream HTTP/2 connection of one client connection, shared by its streams (opened on
/// the first, again if it closed): a fresh connection per stream made bursts of gRPC calls
/// overflow the upstream's accept queue, and the dropped SYNs cost a 1 s retransmit.
type UpstreamH2 =
    Arc<tokio::sync::Mutex<Option<hyper::client::conn::http2::SendRequest<Incoming>>>>;

async fn serve_connection(stream: TcpStream, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    let h2: UpstreamH2 = Arc::default();
    let service = hyper::service::service_fn(move |req| {
        let (state, h2) = (state.clone(), h2.clone());
        async move { handle(state, h2, req).await }
    });
    let builder = Builder::new(TokioExecutor::new());
    if let Err(e) = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "chaos connection ended with an error");
    }
}

/// A cut the proxy made on purpose: hyper closes the connection (HTTP/2: resets the stream).
#[derive(Debug)]
struct Cut;

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cut by a chaos rule")
    }
}

impl StdError for Cut {}

fn full(body: impl Into<Bytes>) -> ChaosBody {
    http_body_util::Full::new(body.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

fn status_response(code: u16, retry_after: Option<u64>) -> Response<ChaosBody> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(full(format!(
        "{{\"message\":\"chaos: injected {code}\",\"code\":{code}}}"
    )));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

async fn handle(
    state: Arc<State>,
    h2: UpstreamH2,
    mut req: Request<Incoming>,
) -> Result<Response<ChaosBody>, Cut> {
    let fired = state.fire(req.method().as_str(), req.uri().path());
    let (head, body_action) = match &fired {
        Some(a) => {
            let (h, b) = a.split();
            (Some(h.clone()), b.cloned())
        }
        None => (None, None),
    };
    match &head {
        Some(Action::Status { code, retry_after }) => {
            return Ok(tamper(
                &state,
                status_response(*code, *retry_after),
                body_action,
            ));
        }
        Some(Action::Reset) => return Err(Cut),
        Some(Action::Hang) => std::future::pending::<()>().await,
        Some(Action::Delay(d)) => tokio::time::sleep(*d).await,
        _ => {}
    }
    // The address the client reached, for upstreams that hand out URLs of their own (Modal's
    // router access): a reverse proxy's `x-forwarded-host`.
    mark_forwarded_host(&mut req);
    let upgrade = req.version() == Version::HTTP_11 && req.headers().contains_key(header::UPGRADE);
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let mut resp = match forward(&state.upstream, &h2, req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "chaos upstream failed");
            let mut r = Response::new(full(format!("chaos proxy: upstream failed: {e}")));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            return Ok(r);
        }
    };
    match &head {
        Some(Action::StatusAfter { code, retry_after }) => {
            // Let the upstream finish its answer (the work is done), then lie about it.
            let body = resp.into_body();
            state.spawn(async move {
                let _ = body.collect().await;
            });
            return Ok(tamper(
                &state,
                status_response(*code, *retry_after),
                body_action,
            ));
        }
        Some(Action::ResetAfter) => return Err(Cut),
        Some(Action::Hold(after)) if resp.status() != StatusCode::SWITCHING_PROTOCOLS => {
            // The whole answer, held (bounded like the emulators' request bodies).
            let (parts, body) = resp.into_parts();
            let body = match Limited::new(body, MAX_HELD).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    tracing::debug!(error = %e, "chaos: the held answer failed");
                    return Err(Cut);
                }
            };
            match after {
                Some(d) => tokio::time::sleep(*d).await,
                None => std::future::pending::<()>().await,
            }
            return Ok(Response::from_parts(parts, full(body)));
        }
        Some(Action::Head { code, content_type }) => {
            *resp.status_mut() = StatusCode::from_u16(*code).unwrap_or(StatusCode::OK);
            match HeaderValue::from_str(content_type) {
                Ok(v) => {
                    resp.headers_mut().insert(header::CONTENT_TYPE, v);
                }
                Err(_) => return Err(Cut),
            }
        }
        _ => {}
    }
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        let (parts, _) = resp.into_parts();
        // Only body actions reach the bytes after the upgrade.
        let action = match (&head, &body_action) {
            (_, Some(b)) => Some(b.clone()),
            (Some(h), None) if h.is_body() => Some(h.clone()),
            _ => None,
        };
        if let Some(client_upgrade) = client_upgrade {
            let pump_state = state.clone();
            state.spawn(async move {
                match (client_upgrade.await, upstream_upgrade.await) {
                    (Ok(client), Ok(upstream)) => {
                        if action.is_some() {
                            pump_state.tampered.fetch_add(1, Ordering::SeqCst);
                        }
                        ws::pump(TokioIo::new(client), TokioIo::new(upstream), action).await;
                    }
                    (c, u) => tracing::debug!(
                        client = c.is_ok(),
                        upstream = u.is_ok(),
                        "chaos upgrade failed"
                    ),
                }
            });
        }
        return Ok(Response::from_parts(parts, full(Bytes::new())));
    }
    let body_action = match head {
        Some(Action::Head { .. }) => body_action,
        Some(a) if a.is_body() => Some(a),
        _ => None,
    };
    let resp = resp.map(|b| b.map_err(BoxError::from).boxed_unsync());
    Ok(tamper(&state, resp, body_action))
}

/// The most of an answer `hold` buffers.
const MAX_HELD: usize = 128 << 20;

/// `resp` with its body passed through `action` (unchanged without one).
fn tamper(state: &State, resp: Response<ChaosBody>, action: Option<Action>) -> Response<ChaosBody> {
    let Some(action) = action else {
        return resp;
    };
    let (mut parts, body) = resp.into_parts();
    if matches!(
        action,
        Action::Endless | Action::DropLast | Action::Garbage(_) | Action::Body(_)
    ) {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    parts.headers.remove(header::TRANSFER_ENCODING);
    let (tx, rx) = mpsc::channel(2);
    state.tampered.fetch_add(1, Ordering::SeqCst);
    state.spawn(pump_body(action, body, tx));
    Response::from_parts(parts, ChannelBody(rx).boxed_unsync())
}

/// The header that tells the upstream which address the client reached (set when absent).
pub const FORWARDED_HOST: &str = "x-forwarded-host";

/// Sets [`FORWARDED_HOST`] on `req` when it has none: the address the client reached (the
/// request URI's authority, else its `Host` header), as a reverse proxy does.
pub fn mark_forwarded_host<B>(req: &mut Request<B>) {
    let reached = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        });
    if let Some(host) = reached.and_then(|h| HeaderValue::from_str(&h).ok()) {
        req.headers_mut().entry(FORWARDED_HOST).or_insert(host);
    }
}

/// Sends the request to the upstream in its HTTP version: HTTP/1.1 on a fresh connection,
/// HTTP/2 on the client connection's shared upstream connection.
async fn forward(
    upstream: &str,
    h2: &UpstreamH2,
    mut req: Request<Incoming>,
) -> Result<Response<Incoming>, BoxError> {
    if req.version() == Version::HTTP_2 {
        let pq = req
            .uri()
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_owned();
        *req.uri_mut() = format!("http://{upstream}{pq}").parse()?;
        let mut send = {
            let mut shared = h2.lock().await;
            match shared.as_ref().filter(|s| !s.is_closed()) {
                Some(s) => s.clone(),
                None => {
                    let tcp = TcpStream::connect(upstream).await?;
                    let _ = tcp.set_nodelay(true);
                    let (send, conn) = hyper::client::conn::http2::handshake(
                        TokioExecutor::new(),
                        TokioIo::new(tcp),
                    )
                    .await?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    *shared = Some(send.clone());
                    send
                }
            }
        };
        send.ready().await?;
        Ok(send.send_request(req).await?)
    } else {
        let tcp = TcpStream::connect(upstream).await?;
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(tcp);
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(send.send_request(req).await?)
    }
}

/// A body fed by a pump task.
struct ChannelBody(mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

/// xorshift64*: garbage that is the same on every run.
pub(crate) struct Noise(u64);

impl Noise {
    pub(crate) fn new() -> Noise {
        Noise(0x9E37_79B9_7F4A_7C15)
    }

    pub(crate) fn fill(&mut self, n: usize) -> Bytes {
        let mut out = BytesMut::with_capacity(n + 8);
        while out.len() < n {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            out.extend_from_slice(&self.0.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        out.truncate(n);
        out.freeze()
    }
}

/// How long a merging re-chunker waits for more bytes before it sends what it has.
pub(crate) const MERGE_WAIT: Duration = Duration::from_millis(30);

/// The size of each piece of an endless body.
pub(crate) const ENDLESS_PIECE: usize = 64 << 10;

async fn pump_body(
    action: Action,
    mut body: ChaosBody,
    tx: mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
) {
    let data = |b: Bytes| Ok(Frame::data(b));
    match action {
        Action::Stall => {
            // Keep the upstream's answer open, and send nothing, until the client goes.
            tx.closed().await;
            drop(body);
        }
        Action::Endless => {
            drop(body);
            let piece = Bytes::from(vec![b'x'; ENDLESS_PIECE]);
            while tx.send(data(piece.clone())).await.is_ok() {}
        }
        Action::Body(text) => {
            drop(body);
            let _ = tx.send(data(Bytes::from(text))).await;
        }
        Action::Garbage(n) => {
            drop(body);
            let mut noise = Noise::new();
            let mut left = n;
            while left > 0 {
                let k = left.min(ENDLESS_PIECE);
                if tx.send(data(noise.fill(k))).await.is_err() {
                    return;
                }
                left -= k;
            }
        }
        Action::Trickle { every, bytes } => {
            while let Some(frame) = next_frame(&mut body, &tx).await {
                match frame.into_data() {
                    Ok(mut b) => {
                        while !b.is_empty() {
                            tokio::time::sleep(every).await;
                            let piece = b.split_to(bytes.min(b.len()));
                            if tx.send(data(piece)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(other) => {
                        if tx.send(Ok(other)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        Action::Truncate(limit) => {
            let mut sent = 0u64;
            while let Some(frame) = next_frame(&mut body, &tx).await {
                let Ok(mut b) = frame.into_data() else {
                    break;
                };
                let room = limit.saturating_sub(sent) as usize;
                if b.len() >= room {
                    b.truncate(room);
                    if !b.is_empty() {
                        let _ = tx.send(data(b)).await;
                    }
                    break;
                }
                sent += b.len() as u64;
                if tx.send(data(b)).await.is_err() {
                    return;
                }
            }
            let _ = tx.send(Err(Box::new(Cut))).await;
        }
        Action::Rechunk(size) => {
            let mut buf = BytesMut::new();
            loop {
                let frame = if buf.is_empty() {
                    next_frame(&mut body, &tx).await
                } else {
                    match tokio::time::timeout(MERGE_WAIT, next_frame(&mut body, &tx)).await {
                        Ok(f) => f,
                        Err(_) => {
                            // Nothing more for now: send what was merged.
                            let piece = buf.split().freeze();
                            if tx.send(data(piece)).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    }
                };
                match frame.map(Frame::into_data) {
                    Some(Ok(b)) => {
                        buf.extend_from_slice(&b);
                        while buf.len() >= size {
                            let piece = buf.split_to(size).freeze();
                            if tx.send(data(piece)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Some(Err(trailers)) => {
                        if !buf.is_empty() && tx.send(data(buf.split().freeze())).await.is_err() {
                            return;
                        }
                        let _ = tx.send(Ok(trailers)).await;
                    }
                    None => {
                        if !buf.is_empty() {
                            let _ = tx.send(data(buf.split().freeze())).await;
                        }
                        return;
                    }
                }
            }
        }
        Action::DropLast => {
            let mut held: Option<Bytes> = None;
            while let Some(frame) = next_frame(&mut body, &tx).await {
                // Trailers are the final frame too: dropped.
                let Ok(b) = frame.into_data() else {
                    break;
                };
                if let Some(prev) = held.replace(b)
                    && tx.send(data(prev)).await.is_err()
                {
                    return;
                }
            }
        }
        // Handled before the body.
        Action::Status { .. }
        | Action::StatusAfter { .. }
        | Action::Head { .. }
        | Action::Hold(_)
        | Action::Then { .. }
        | Action::Reset
        | Action::ResetAfter
        | Action::Delay(_)
        | Action::Hang => {}
    }
}

/// The upstream body's next frame; `None` at its end. An upstream error is passed on (and
/// ends the body).
async fn next_frame(
    body: &mut ChaosBody,
    tx: &mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
) -> Option<Frame<Bytes>> {
    loop {
        match body.frame().await? {
            // Empty pieces (HTTP/1.1 decoders yield one at the end) are not pieces.
            Ok(f) if f.data_ref().is_some_and(|d| d.is_empty()) => continue,
            Ok(f) => return Some(f),
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
