//! The accept loop: HTTP/1.1 and h2c connections with a header-read timeout and a connection
//! limit below the file-descriptor limit.
//!
//! `axum::serve` sets no timer, so hyper's HTTP/1 `header_read_timeout` is off (hyper 1.12
//! `server/conn/http1.rs`: "Requires a Timer … to take effect"), and it has no connection
//! limit: 20,000 connections that each send half a request head hold 20,000 descriptors until
//! `accept` fails with `EMFILE` and `/execute` hangs. Here:
//!
//! - every HTTP/1 connection must send a complete request head within `header_timeout` of
//!   starting to read one; that includes the wait for the next request on a kept-alive
//!   connection, so an idle connection is closed after the same time;
//! - at most `limit` connections are open; at the limit, a new connection evicts the oldest open
//!   connection that has no request in flight (a partial head, an idle keep-alive), so a flood
//!   of slow clients cannot starve a client that sends whole requests; if every connection is
//!   busy, the new one is answered `503` and closed at once instead of waiting in the backlog.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};
use tower_service::Service;

/// Descriptors kept free for everything but client connections (the store's pool, adapter
/// connections, sandbox pipes, the log).
pub const FD_RESERVE: u64 = 256;

/// The connection limit when none is configured: the soft descriptor limit (raised to the
/// hard limit first, as Go's runtime does) minus [`FD_RESERVE`], at least 16.
pub fn default_connection_limit() -> usize {
    let soft = raise_nofile();
    usize::try_from(soft.saturating_sub(FD_RESERVE).max(16)).unwrap_or(usize::MAX)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in force.
#[allow(unsafe_code)] // two libc calls on a local struct
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit write/read the struct passed; no other invariants.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

struct Conn {
    /// Requests in flight on it.
    busy: Arc<AtomicUsize>,
    abort: AbortHandle,
}

/// The open client connections.
pub struct Connections {
    limit: usize,
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Conn>>,
    evicted: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("open", &self.open())
            .field("limit", &self.limit)
            .finish()
    }
}

impl Connections {
    /// At most `limit` open connections.
    pub fn new(limit: usize) -> Connections {
        Connections {
            limit: limit.max(1),
            next: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().expect("connections").len()
    }

    /// Connections with a request in flight now.
    pub fn busy(&self) -> usize {
        self.open
            .lock()
            .expect("connections")
            .values()
            .filter(|c| c.busy.load(Ordering::SeqCst) > 0)
            .count()
    }

    /// Connections closed to make room (since start).
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Connections answered 503 at once because every open one was busy (since start).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// True if a new connection would be served: below the limit, or one open connection has
    /// no request in flight and would make room.
    pub fn can_accept(&self) -> bool {
        let open = self.open.lock().expect("connections");
        open.len() < self.limit || open.values().any(|c| c.busy.load(Ordering::SeqCst) == 0)
    }

    /// Makes room for one more: true if there is (or now is) room.
    fn make_room(&self) -> bool {
        let mut open = self.open.lock().expect("connections");
        if open.len() < self.limit {
            return true;
        }
        let idle = open
            .iter()
            .find(|(_, c)| c.busy.load(Ordering::SeqCst) == 0)
            .map(|(id, _)| *id);
        match idle {
            Some(id) => {
                if let Some(c) = open.remove(&id) {
                    c.abort.abort();
                }
                self.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

/// Serves `app` on `listener` until the task is aborted.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    connections: Arc<Connections>,
    header_timeout: Duration,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let mut tasks = JoinSet::new();
    loop {
        let stream = tokio::select! {
            r = listener.accept() => r,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let stream = match stream {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "execseam serve: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !connections.make_room() {
            connections.refused.fetch_add(1, Ordering::Relaxed);
            tasks.spawn(refuse(stream));
            continue;
        }
        let id = connections.next.fetch_add(1, Ordering::Relaxed);
        let busy = Arc::new(AtomicUsize::new(0));
        let conns = connections.clone();
        let abort = tasks.spawn(connection(
            stream,
            app.clone(),
            builder.clone(),
            busy.clone(),
            Forget(conns, id),
        ));
        connections
            .open
            .lock()
            .expect("connections")
            .insert(id, Conn { busy, abort });
    }
}

/// Removes a connection from the table when its task ends (or is aborted).
struct Forget(Arc<Connections>, u64);

impl Drop for Forget {
    fn drop(&mut self) {
        if let Ok(mut open) = self.0.open.lock() {
            open.remove(&self.1);
        }
    }
}

/// Counts a request in flight while it lives.
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body that keeps its request counted until it ends.
struct Guarded {
    inner: axum::body::Body,
    _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    builder: Arc<Builder<TokioExecutor>>,
    busy: Arc<AtomicUsize>,
    _forget: Forget,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        busy.fetch_add(1, Ordering::SeqCst);
        let guard = Busy(busy.clone());
        let mut app = app.clone();
        async move {
            // The request is in flight until its answer's body ends (`/execute/stream`).
            let r = match app.call(req.map(axum::body::Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(r.map(|inner| {
                axum::body::Body::new(Guarded {
                    inner,
                    _busy: guard,
                })
            }))
        }
    });
    if let Err(e) = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "execseam serve: connection ended with an error");
    }
}

/// At the limit with every connection busy: a fast, explicit refusal.
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"error":{"code":"SERVER_BUSY","message":"every connection is busy; retry"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}
