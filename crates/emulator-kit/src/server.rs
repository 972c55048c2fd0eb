//! The loopback server every emulator runs on: HTTP/1.1 and HTTP/2 (prior knowledge, so gRPC
//! over h2c works), WebSocket upgrades, and a per-connection reset for fault injection.
//!
//! Every request body is bounded ([`MAX_REQUEST_BODY`]): a handler that buffers a body fails
//! at the bound instead of holding a 2 GiB upload in memory. A handler that streams a body,
//! holding a bounded piece of it at a time, lifts the bound ([`BodyLimit`],
//! [`stream_then_drain`]), as a service with no total bound does.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tower_service::Service;

/// The most a request body may carry, in bytes (128 MiB); beyond it the body fails, and the
/// handler reading it answers with an error.
pub const MAX_REQUEST_BODY: usize = 128 << 20;

/// The bound on one request's body ([`MAX_REQUEST_BODY`]), a request extension on every request.
#[derive(Clone, Debug)]
pub struct BodyLimit(Arc<AtomicUsize>);

impl BodyLimit {
    /// No total bound on this request's body: for a handler that streams it and bounds what it
    /// holds itself.
    pub fn lift(&self) {
        self.0.store(usize::MAX, Ordering::Relaxed);
    }
}

/// A request body that fails once more than its [`BodyLimit`] has come (the error's text is
/// `http_body_util::Limited`'s).
struct Bounded {
    inner: hyper::body::Incoming,
    read: usize,
    limit: Arc<AtomicUsize>,
}

impl http_body::Body for Bounded {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let this = &mut *self;
        match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                this.read = this
                    .read
                    .saturating_add(frame.data_ref().map_or(0, |d| d.len()));
                if this.read > this.limit.load(Ordering::Relaxed) {
                    return Poll::Ready(Some(Err("length limit exceeded".into())));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// The request with its body bounded by a fresh [`BodyLimit`] (also in its extensions).
fn bounded(req: http::Request<hyper::body::Incoming>) -> http::Request<Body> {
    let limit = BodyLimit(Arc::new(AtomicUsize::new(MAX_REQUEST_BODY)));
    let mut req = req.map(|inner| {
        Body::new(Bounded {
            inner,
            read: 0,
            limit: limit.0.clone(),
        })
    });
    req.extensions_mut().insert(limit);
    req
}

/// Serves a request whose body `handler` reads as it arrives: the bound is lifted (`limit`,
/// the request's [`BodyLimit`]), `handler` gets the body one piece at a time (at most one piece
/// waits for it), and whatever it leaves unread is read and dropped before the answer is sent
/// (a server that answers early and leaves the body unread makes hyper close the connection,
/// which a client that pooled it then sees fail on its next request).
pub async fn stream_then_drain<F, Fut>(
    body: Body,
    limit: Option<&BodyLimit>,
    handler: F,
) -> axum::response::Response
where
    F: FnOnce(Body) -> Fut,
    Fut: Future<Output = axum::response::Response>,
{
    use http_body_util::BodyExt as _;
    if let Some(limit) = limit {
        limit.lift();
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let forward = async move {
        let (mut body, mut tx) = (body, Some(tx));
        while let Some(frame) = body.frame().await {
            let piece = match frame.map(http_body::Frame::into_data) {
                Ok(Ok(data)) => Ok(data),
                Ok(Err(_trailers)) => continue,
                Err(e) => Err(e),
            };
            let failed = piece.is_err();
            if let Some(to) = &tx
                && to.send(piece).await.is_err()
            {
                tx = None;
            }
            if failed {
                break;
            }
        }
    };
    let (resp, ()) = tokio::join!(handler(Body::new(Received(rx))), forward);
    resp
}

/// A body whose pieces come from a channel ([`stream_then_drain`]).
struct Received(tokio::sync::mpsc::Receiver<Result<bytes::Bytes, axum::Error>>);

impl http_body::Body for Received {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|piece| piece.map(|r| r.map(http_body::Frame::data)))
    }
}

/// Lets a handler reset its own connection (a request extension on every request).
#[derive(Clone, Debug)]
pub struct ConnControl {
    reset: Arc<Notify>,
}

impl ConnControl {
    /// Resets the connection: the client sees a TCP RST and no response. The handler should then
    /// wait forever ([`std::future::pending`]); its future is dropped with the connection.
    pub fn reset(&self) {
        self.reset.notify_one();
    }
}

/// The `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key` (RFC 6455 §4.2.2).
pub fn websocket_accept(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// Resets the request's connection and never returns (so it fits any handler's return type).
pub async fn reset_connection<T>(ctl: Option<&ConnControl>) -> T {
    if let Some(ctl) = ctl {
        ctl.reset();
    }
    std::future::pending().await
}

/// A running server. Dropping it (or [`Server::shutdown`]) stops accepting and closes every
/// connection.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` (use port 0 for an ephemeral port) and serves `router`.
    pub async fn start(addr: SocketAddr, router: Router) -> std::io::Result<Server> {
        Server::serve(TcpListener::bind(addr).await?, router)
    }

    /// Serves `router` on a listener already bound (so its address could be known first).
    pub fn serve(listener: TcpListener, router: Router) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, router, stopped));
        tracing::debug!(%addr, "emulator listening");
        Ok(Server {
            addr,
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

    /// Stops the server and waits for its connections to close.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn accept_loop(listener: TcpListener, router: Router, mut stopped: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, router.clone(), stopped.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// Serves `router` on one connection that is already open (HTTP/1.1, or HTTP/2 with prior
/// knowledge, as the client speaks): for a service inside an emulated sandbox that a tunnel
/// (a Kubernetes port-forward) reaches instead of a socket. Returns when the connection ends.
pub async fn serve_stream<S>(stream: S, router: Router)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let mut router = router.clone();
        async move {
            let resp = router.call(bounded(req)).await;
            Ok::<_, Infallible>(resp.unwrap_or_else(|never| match never {}))
        }
    });
    let builder = Builder::new(TokioExecutor::new());
    if let Err(e) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "tunnelled connection ended with an error");
    }
}

async fn serve_connection(stream: TcpStream, router: Router, mut stopped: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    // A second descriptor on the same socket, to set SO_LINGER=0 (an RST on close) on reset.
    let twin = stream
        .into_std()
        .and_then(|s| Ok((s.try_clone()?, s)))
        .and_then(|(twin, s)| Ok((twin, TcpStream::from_std(s)?)));
    let (twin, stream) = match twin {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(error = %e, "cannot prepare the connection");
            return;
        }
    };
    let reset = Arc::new(Notify::new());
    let ctl = ConnControl {
        reset: reset.clone(),
    };
    let service =
        hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ctl.clone());
            let mut router = router.clone();
            // The route only: never the query string, headers or body (they may carry tokens).
            let (method, route) = (req.method().clone(), req.uri().path().to_owned());
            let started = std::time::Instant::now();
            async move {
                let resp = router.call(bounded(req)).await;
                let resp = resp.unwrap_or_else(|never| match never {});
                tracing::debug!(
                    %method,
                    route = %route,
                    status = resp.status().as_u16(),
                    latency_ms = started.elapsed().as_millis() as u64,
                    "emulator request"
                );
                Ok::<_, Infallible>(resp)
            }
        });
    let builder = Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = reset.notified() => {
            if let Ok(twin) = TcpStream::from_std(twin) {
                #[allow(deprecated)] // zero linger never blocks: it is exactly the RST we want
                let _ = twin.set_linger(Some(Duration::ZERO));
            }
            tracing::debug!("connection reset by fault injection");
        }
        _ = stopped.changed() => {}
    }
}
