//! The shared server: HTTP/1.1, h2c, and the connection reset used by fault injection.

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use execseam_emulator_kit::{ConnControl, Server, reset_connection};

fn router() -> Router {
    Router::new().route("/ok", get(|| async { "fine" })).route(
        "/reset",
        get(|Extension(ctl): Extension<ConnControl>| async move {
            reset_connection::<&'static str>(Some(&ctl)).await
        }),
    )
}

#[tokio::test]
async fn serves_http1_and_h2c_and_resets_on_demand() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = Server::start("127.0.0.1:0".parse().unwrap(), router())
        .await
        .unwrap();
    let base = server.base_url();

    let h1 = reqwest::Client::new();
    assert_eq!(
        h1.get(format!("{base}/ok"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "fine"
    );

    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = h2.get(format!("{base}/ok")).send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.text().await.unwrap(), "fine");

    let err = h1.get(format!("{base}/reset")).send().await.unwrap_err();
    assert!(
        err.is_request() || err.is_connect() || err.to_string().contains("reset") || err.is_body(),
        "{err:?}"
    );
    assert!(!err.is_timeout());

    // The server keeps serving after a reset.
    assert_eq!(
        h1.get(format!("{base}/ok")).send().await.unwrap().status(),
        200
    );
    server.shutdown().await;
    assert!(
        reqwest::get(format!("{base}/ok")).await.is_err(),
        "closed after shutdown"
    );
}

/// A body of `chunks` MiB of zeros, made as it is sent.
struct Zeros(usize);

impl http_body::Body for Zeros {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        if self.0 == 0 {
            return std::task::Poll::Ready(None);
        }
        self.0 -= 1;
        static MIB: [u8; 1 << 20] = [0; 1 << 20];
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::from_static(
            &MIB,
        )))))
    }
}

fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        >> 10
}

/// A handler that buffers its body (as emulators do for JSON and Connect requests) gets an
/// error at the server's bound, so a 2 GiB upload never sits in memory.
#[tokio::test]
async fn request_bodies_are_bounded() {
    use axum::http::StatusCode;
    use execseam_emulator_kit::server::MAX_REQUEST_BODY;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let router = Router::new().route(
        "/upload",
        axum::routing::post(|body: axum::body::Body| async move {
            match axum::body::to_bytes(body, usize::MAX).await {
                Ok(b) => (StatusCode::OK, b.len().to_string()),
                Err(e) => (StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
            }
        }),
    );
    let server = Server::start("127.0.0.1:0".parse().unwrap(), router)
        .await
        .unwrap();
    let before = peak_rss_mib();
    let r = reqwest::Client::new()
        .post(format!("{}/upload", server.base_url()))
        .body(reqwest::Body::wrap(Zeros(2048)))
        .send()
        .await;
    // The server answers (or cuts the upload) at the bound; either way it is not a 200.
    if let Ok(r) = r {
        assert_eq!(r.status().as_u16(), 413);
    }
    let grown = peak_rss_mib().saturating_sub(before);
    assert!(
        grown < (MAX_REQUEST_BODY as u64 >> 20) + 128,
        "a 2 GiB upload grew the peak RSS by {grown} MiB"
    );
    let small = reqwest::Client::new()
        .post(format!("{}/upload", server.base_url()))
        .body(vec![1u8; 1000])
        .send()
        .await
        .unwrap();
    assert_eq!(small.text().await.unwrap(), "1000");
}

/// A handler that streams its body lifts the bound (`stream_then_drain`): 136 MiB, more than
/// the bound, come through one piece at a time; what a handler leaves unread is drained
/// before its answer, so the client's next request on the same connection is answered.
#[tokio::test]
async fn a_streamed_body_has_no_total_bound_and_its_rest_is_drained() {
    use axum::Extension;
    use axum::body::Body;
    use execseam_emulator_kit::server::{BodyLimit, MAX_REQUEST_BODY, stream_then_drain};
    use http_body_util::BodyExt as _;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let route = |most: usize| {
        axum::routing::post(
            move |limit: Option<Extension<BodyLimit>>, body: Body| async move {
                stream_then_drain(body, limit.as_deref(), |mut body| async move {
                    let mut n = 0;
                    while n < most
                        && let Some(Ok(frame)) = body.frame().await
                    {
                        n += frame.data_ref().map_or(0, |d| d.len());
                    }
                    axum::response::IntoResponse::into_response(n.to_string())
                })
                .await
            },
        )
    };
    let router = Router::new()
        .route("/all", route(usize::MAX))
        .route("/some", route(1));
    let server = Server::start("127.0.0.1:0".parse().unwrap(), router)
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let post = |path: &str, mib: usize| {
        http.post(format!("{}{path}", server.base_url()))
            .body(reqwest::Body::wrap(Zeros(mib)))
            .send()
    };
    let all = post("/all", (MAX_REQUEST_BODY >> 20) + 8).await.unwrap();
    assert_eq!(
        all.text().await.unwrap(),
        (MAX_REQUEST_BODY + (8 << 20)).to_string()
    );
    let some = post("/some", 4).await.unwrap();
    let read: usize = some.text().await.unwrap().parse().unwrap();
    assert!(read > 0 && read < 4 << 20, "{read}");
    let next = post("/all", 1).await.unwrap();
    assert_eq!(next.text().await.unwrap(), (1 << 20).to_string());
}
