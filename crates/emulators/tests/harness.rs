//! The shared server: HTTP/1.1, h2c, and the connection reset used by fault injection.

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use execseam_emulators::harness::{ConnControl, Server, reset_connection};

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
