//! Serving a WebSocket from an axum handler: the 101 answer, then the socket once hyper has
//! switched protocols.

use std::future::Future;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio_websockets::{Limits, WebSocketStream};

/// A server-side WebSocket over an upgraded connection.
pub type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// `Upgrade: websocket` with `Connection: upgrade`.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    has(header::UPGRADE, "websocket") && has(header::CONNECTION, "upgrade")
}

/// Answers the upgrade with 101 and hands the socket to `serve`.
pub fn upgrade<F, Fut>(req: &mut Request, serve: F) -> Response
where
    F: FnOnce(Ws) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        let mut r = Response::new(Body::from("missing Sec-WebSocket-Key"));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                // tokio-websockets, not tungstenite: the frames carry the token and stdin, and
                // tungstenite logs every frame's payload at TRACE.
                let ws = tokio_websockets::ServerBuilder::new()
                    .limits(Limits::default().max_payload_len(Some(256 << 20)))
                    .serve(TokioIo::new(upgraded));
                serve(ws).await;
            }
            Err(e) => tracing::debug!(error = %e, "websocket upgrade failed"),
        }
    });
    switching_protocols(key.as_bytes(), None)
}

/// The 101 answer to a WebSocket upgrade whose `Sec-WebSocket-Key` is `key`, selecting
/// `protocol` if given.
pub fn switching_protocols(key: &[u8], protocol: Option<&str>) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&crate::server::websocket_accept(key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(v) = protocol.and_then(|p| HeaderValue::from_str(p).ok()) {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn accept_key_is_rfc_6455s() {
        // RFC 6455 §1.3's example.
        assert_eq!(
            crate::server::websocket_accept(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
