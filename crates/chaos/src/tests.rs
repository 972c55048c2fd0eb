use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request as AxumRequest;
use axum::routing::{any, get};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use execseam_emulator_kit::Server;

const TEXT: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

struct Upstream {
    server: Server,
    hits: Arc<AtomicUsize>,
}

async fn upstream() -> Upstream {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let h2 = hits.clone();
    let router = Router::new()
        .route(
            "/text",
            get(move || {
                h.fetch_add(1, Ordering::SeqCst);
                async { TEXT }
            }),
        )
        .route(
            "/chunks",
            get(move || {
                h2.fetch_add(1, Ordering::SeqCst);
                async {
                    let chunks = ["one,", "two,", "three"]
                        .map(|c: &'static str| Bytes::from_static(c.as_bytes()));
                    axum::body::Body::new(Paced(Vec::from(chunks).into_iter(), None))
                }
            }),
        )
        .route("/ws", any(ws_upstream));
    Upstream {
        server: Server::start(SocketAddr::from(([127, 0, 0, 1], 0)), router)
            .await
            .unwrap(),
        hits,
    }
}

/// A body that yields each piece after a short pause (so they are separate chunks).
struct Paced(
    std::vec::IntoIter<Bytes>,
    Option<Pin<Box<tokio::time::Sleep>>>,
);

impl Body for Paced {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let sleep = self
            .1
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(40))));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.1 = None;
        Poll::Ready(self.0.next().map(|b| Ok(Frame::data(b))))
    }
}

/// A hand-made WebSocket server: after the upgrade it sends text frames "a" and "bb", then a
/// close frame.
async fn ws_upstream(mut req: AxumRequest) -> Response<axum::body::Body> {
    let on = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(up) = on.await {
            let mut io = TokioIo::new(up);
            let _ = io.write_all(&[0x81, 1, b'a']).await;
            let _ = io.write_all(&[0x81, 2, b'b', b'b']).await;
            let _ = io.write_all(&[0x88, 2, 0x03, 0xe8]).await;
            let _ = io.flush().await;
            let mut sink = [0u8; 64];
            let _ = tokio::time::timeout(Duration::from_secs(2), io.read(&mut sink)).await;
        }
    });
    Response::builder()
        .status(101)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "upgrade")
        .header("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        .body(axum::body::Body::empty())
        .unwrap()
}

async fn proxy(up: &Upstream, rules: &str) -> ChaosProxy {
    ChaosProxy::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &up.server.base_url(),
        parse_rules(rules).unwrap(),
    )
    .await
    .unwrap()
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn h2_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap()
}

async fn get_text(c: &reqwest::Client, url: String) -> Result<(u16, Bytes), reqwest::Error> {
    let r = c.get(url).send().await?;
    let status = r.status().as_u16();
    Ok((status, r.bytes().await?))
}

#[tokio::test]
async fn passes_through_untouched_on_http1_and_http2() {
    let up = upstream().await;
    let p = proxy(&up, "").await;
    for c in [client(), h2_client()] {
        let (s, b) = get_text(&c, format!("{}/text", p.base_url()))
            .await
            .unwrap();
        assert_eq!((s, &b[..]), (200, TEXT.as_bytes()));
        let (_, b) = get_text(&c, format!("{}/chunks", p.base_url()))
            .await
            .unwrap();
        assert_eq!(&b[..], b"one,two,three");
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 4);
    assert_eq!(p.requests().len(), 4);
}

#[tokio::test]
async fn status_answers_without_forwarding_and_counts_select_the_nth() {
    let up = upstream().await;
    let p = proxy(&up, "GET /text#2=status:429:86400").await;
    let c = client();
    let url = format!("{}/text", p.base_url());
    assert_eq!(get_text(&c, url.clone()).await.unwrap().0, 200);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers()["retry-after"], "86400");
    assert_eq!(get_text(&c, url).await.unwrap().0, 200);
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        2,
        "the 429 was not forwarded"
    );
    let fired: Vec<_> = p.requests().into_iter().map(|s| s.fired).collect();
    assert_eq!(
        fired,
        [
            None,
            Some(Action::Status {
                code: 429,
                retry_after: Some(86400)
            }),
            None
        ]
    );
}

#[tokio::test]
async fn status_after_and_reset_after_forward_first() {
    let up = upstream().await;
    let p = proxy(&up, "*#1=status-after:502;*#2=reset-after").await;
    let c = client();
    let url = format!("{}/text", p.base_url());
    assert_eq!(get_text(&c, url.clone()).await.unwrap().0, 502);
    assert!(get_text(&c, url).await.is_err());
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn reset_and_hang_never_reach_the_upstream() {
    let up = upstream().await;
    let p = proxy(&up, "*#1=reset;*#2=hang").await;
    for c in [client(), h2_client()] {
        p.set_rules(parse_rules("*#1=reset;*#2=hang").unwrap());
        let url = format!("{}/text", p.base_url());
        assert!(get_text(&c, url.clone()).await.is_err());
        let hung = tokio::time::timeout(Duration::from_millis(300), get_text(&c, url)).await;
        assert!(hung.is_err(), "hang answered");
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn body_actions_tamper_with_what_the_client_reads() {
    let up = upstream().await;
    for c in [client(), h2_client()] {
        let p = proxy(&up, "/text=truncate:10").await;
        let r = c
            .get(format!("{}/text", p.base_url()))
            .send()
            .await
            .unwrap();
        assert!(
            r.bytes().await.is_err(),
            "a truncated body read as complete"
        );

        let p = proxy(&up, "*=rechunk:1").await;
        let (_, b) = get_text(&c, format!("{}/chunks", p.base_url()))
            .await
            .unwrap();
        assert_eq!(&b[..], b"one,two,three", "re-chunking changes nothing");
        let p = proxy(&up, "*=rechunk:65536").await;
        let (_, b) = get_text(&c, format!("{}/chunks", p.base_url()))
            .await
            .unwrap();
        assert_eq!(&b[..], b"one,two,three");

        let p = proxy(&up, "*=drop-last").await;
        let (_, b) = get_text(&c, format!("{}/chunks", p.base_url()))
            .await
            .unwrap();
        assert_eq!(
            &b[..],
            b"one,two,",
            "the final piece is dropped: {:?}",
            p.requests()
        );

        let p = proxy(&up, "*=body:{}").await;
        let (s, b) = get_text(&c, format!("{}/text", p.base_url()))
            .await
            .unwrap();
        assert_eq!((s, &b[..]), (200, &b"{}"[..]));

        let p = proxy(&up, "*=garbage:50").await;
        let (s, b) = get_text(&c, format!("{}/text", p.base_url()))
            .await
            .unwrap();
        assert_eq!((s, b.len()), (200, 50));
        assert_ne!(&b[..], &TEXT.as_bytes()[..50]);

        let p = proxy(&up, "*=trickle:5:8").await;
        let start = Instant::now();
        let (_, b) = get_text(&c, format!("{}/text", p.base_url()))
            .await
            .unwrap();
        assert_eq!(&b[..], TEXT.as_bytes());
        assert!(
            start.elapsed() >= Duration::from_millis(40),
            "{:?}",
            start.elapsed()
        );

        let p = proxy(&up, "*=stall").await;
        let r = c
            .get(format!("{}/text", p.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "headers arrive");
        let body = tokio::time::timeout(Duration::from_millis(300), r.bytes()).await;
        assert!(body.is_err(), "a stalled body completed");

        let p = proxy(&up, "*=endless").await;
        let mut r = c
            .get(format!("{}/text", p.base_url()))
            .send()
            .await
            .unwrap();
        let mut n = 0usize;
        while n < 4 << 20 {
            let chunk = r.chunk().await.unwrap().expect("an endless body ended");
            assert!(chunk.iter().all(|&b| b == b'x'));
            n += chunk.len();
        }
    }
}

async fn ws_frames(p: &ChaosProxy) -> Vec<u8> {
    let mut tcp = TcpStream::connect(p.addr()).await.unwrap();
    tcp.write_all(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), tcp.read_to_end(&mut all)).await;
    let head_end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a 101 head")
        + 4;
    assert!(
        all.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&all)
    );
    all.split_off(head_end)
}

#[tokio::test]
async fn websocket_frames_pass_and_drop_last_drops_the_final_data_frame() {
    let up = upstream().await;
    let p = proxy(&up, "").await;
    assert_eq!(
        ws_frames(&p).await,
        [0x81, 1, b'a', 0x81, 2, b'b', b'b', 0x88, 2, 0x03, 0xe8]
    );
    let p = proxy(&up, "GET /ws=drop-last").await;
    assert_eq!(ws_frames(&p).await, [0x81, 1, b'a', 0x88, 2, 0x03, 0xe8]);
    let p = proxy(&up, "GET /ws=truncate:4").await;
    assert_eq!(ws_frames(&p).await, [0x81, 1, b'a', 0x81]);
    let p = proxy(&up, "GET /ws=rechunk:1").await;
    assert_eq!(ws_frames(&p).await.len(), 11);
}

#[tokio::test]
async fn a_bad_upstream_is_refused_at_start() {
    for bad in ["https://x:1", "x:1", "http://x:1/path", "http://x"] {
        assert!(
            ChaosProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), bad, vec![])
                .await
                .is_err(),
            "{bad}"
        );
    }
}

/// The HTTP/2 streams of one client connection share one upstream connection: with a fresh one
/// per stream, a burst of gRPC calls overflowed the upstream's accept queue (the dropped SYNs
/// cost 1 s retransmits; the Modal throughput rows of `cargo xtask bench` showed it).
#[tokio::test]
async fn http2_streams_of_one_connection_share_one_upstream_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    let serving = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(full(TEXT)))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    let p = ChaosProxy::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &format!("http://{addr}"),
        Vec::new(),
    )
    .await
    .unwrap();
    let c = h2_client();
    let calls = (0..40).map(|_| get_text(&c, format!("{}/text", p.base_url())));
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.unwrap(), (200, Bytes::from_static(TEXT.as_bytes())));
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one upstream connection"
    );
    serving.abort();
}

#[tokio::test]
async fn subscribers_see_each_request_a_rule_fired_on() {
    let up = upstream().await;
    let p = proxy(&up, "GET /text#2=status:503").await;
    let mut fired = p.subscribe();
    let c = client();
    let url = format!("{}/text", p.base_url());
    assert_eq!(get_text(&c, url.clone()).await.unwrap().0, 200);
    assert_eq!(get_text(&c, url).await.unwrap().0, 503);
    let seen = tokio::time::timeout(Duration::from_secs(5), fired.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str(), seen.fired),
        (
            "GET",
            "/text",
            Some(Action::Status {
                code: 503,
                retry_after: None
            })
        )
    );
    assert!(
        fired.try_recv().is_err(),
        "only the request a rule fired on"
    );
}
