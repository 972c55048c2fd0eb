//! The loopback server every emulator runs on: HTTP/1.1 and HTTP/2 (prior knowledge, so gRPC
//! over h2c works), WebSocket upgrades, and a per-connection reset for fault injection.
//!
//! Every request body is bounded ([`MAX_REQUEST_BODY`]): a handler that buffers a body fails
//! at the bound instead of holding a 2 GiB upload in memory.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
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
            let req = req.map(|b| Body::new(http_body_util::Limited::new(b, MAX_REQUEST_BODY)));
            let resp = router.call(req).await;
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
                let req = req.map(|b| Body::new(http_body_util::Limited::new(b, MAX_REQUEST_BODY)));
                let resp = router.call(req).await;
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
