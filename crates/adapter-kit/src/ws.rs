//! The WebSocket client, written once: the upgrade over a reqwest request ([`upgrade`]: the
//! RFC 6455 handshake, its answer within a deadline, a refusal read bounded in size and time),
//! frames bounded in size, and the one mapping of a frame read's failure ([`frame_error`]).

use std::time::Duration;

use base64::Engine as _;
use execseam_core::Error;
use reqwest::header::{CONNECTION, HeaderMap, UPGRADE};
use tokio_websockets::WebSocketStream;

use crate::http::{self, Refusal};
use crate::retry::{Call, NoAnswer};

/// A WebSocket over an upgraded reqwest connection.
pub type Socket = WebSocketStream<reqwest::Upgraded>;

/// Why an upgrade failed.
#[derive(Debug)]
pub enum UpgradeError {
    /// The request failed ([`http::transport_error`]).
    Transport(reqwest::Error),
    /// No answer within the deadline.
    Deadline(Duration),
    /// The server answered something else than `101 Switching Protocols` (read as a refusal:
    /// at most [`http::MAX_ERROR_BODY`] of its body, within the deadline).
    Refused(Refusal),
    /// The handshake's answer is wrong (a `Sec-WebSocket-Accept` that does not match).
    Handshake(String),
}

/// A WebSocket and the headers of the `101` that opened it.
pub struct Upgraded {
    /// The socket; frames larger than the `max_frame` given to [`upgrade`] are refused.
    pub socket: Socket,
    /// The `101`'s headers.
    pub headers: HeaderMap,
}

/// The `Sec-WebSocket-Accept` a server must answer `key` with (RFC 6455 §4.2.2).
pub fn accept_key(key: &str) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.as_bytes());
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// Upgrades `request` (a GET on an HTTP/1.1-only client, with the adapter's own headers) to a
/// WebSocket: the handshake headers are added, the answer must come within `within`, and frames
/// are limited to `max_frame` bytes.
pub async fn upgrade(
    request: reqwest::RequestBuilder,
    within: Duration,
    max_frame: usize,
) -> Result<Upgraded, UpgradeError> {
    let key = {
        let r = [
            crate::id::random_u64().to_le_bytes(),
            crate::id::random_u64().to_le_bytes(),
        ]
        .concat();
        base64::engine::general_purpose::STANDARD.encode(r)
    };
    let send = request
        .version(reqwest::Version::HTTP_11)
        .header(CONNECTION, "Upgrade")
        .header(UPGRADE, "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", &key)
        .send();
    let started = tokio::time::Instant::now();
    let resp = match tokio::time::timeout(within, send).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(UpgradeError::Transport(e)),
        Err(_) => return Err(UpgradeError::Deadline(within)),
    };
    if resp.status().as_u16() != 101 {
        let left = within.saturating_sub(started.elapsed());
        return Err(UpgradeError::Refused(Refusal::read(resp, left).await));
    }
    let want = accept_key(&key);
    let accept = resp
        .headers()
        .get("sec-websocket-accept")
        .and_then(|v| v.to_str().ok());
    if accept != Some(want.as_str()) {
        return Err(UpgradeError::Handshake(format!(
            "the upgrade answer has Sec-WebSocket-Accept {accept:?}, want {want:?}"
        )));
    }
    let headers = resp.headers().clone();
    let upgraded = resp.upgrade().await.map_err(UpgradeError::Transport)?;
    let socket = tokio_websockets::ClientBuilder::new()
        .limits(tokio_websockets::Limits::default().max_payload_len(Some(max_frame)))
        .take_over(upgraded);
    Ok(Upgraded { socket, headers })
}

/// A frame read's failure of `call`: a frame over the limit or a broken frame is
/// [`ErrorKind::Protocol`], anything else a lost connection ([`ErrorKind::Unavailable`]); after
/// the submit both are [`Retry::Unsafe`].
pub fn frame_error(call: Call, e: &tokio_websockets::Error) -> Error {
    match e {
        tokio_websockets::Error::PayloadTooLong { len, max_len } => call.protocol(format!(
            "a WebSocket frame of {len} bytes exceeds the {max_len}-byte frame limit"
        )),
        tokio_websockets::Error::Protocol(p) => {
            call.protocol(format!("a broken WebSocket frame: {p}"))
        }
        other => call.no_answer(
            NoAnswer::Cut,
            format!("the WebSocket connection was lost: {other}"),
        ),
    }
}

impl UpgradeError {
    /// The error of `call`; a refusal is mapped by `refused` (the provider's status table).
    pub fn into_error(self, call: Call, refused: impl FnOnce(Refusal) -> Error) -> Error {
        match self {
            UpgradeError::Transport(e) => http::transport_error(call, e),
            UpgradeError::Deadline(d) => call.no_answer(
                NoAnswer::Timeout,
                format!(
                    "no answer to the WebSocket upgrade within {}ms",
                    d.as_millis()
                ),
            ),
            UpgradeError::Refused(r) => refused(r),
            UpgradeError::Handshake(m) => call.protocol(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use execseam_core::{ErrorKind, Retry};

    use super::*;
    use crate::retry::Stage;

    #[test]
    fn accept_key_is_rfc_6455s() {
        // RFC 6455 §1.3's example.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn frame_errors_after_the_submit_are_unsafe() {
        let call = Call::new("p", "exec", Stage::After);
        let e = frame_error(
            call,
            &tokio_websockets::Error::PayloadTooLong {
                len: 10,
                max_len: 5,
            },
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Protocol, Retry::Unsafe));
        let e = frame_error(call, &tokio_websockets::Error::AlreadyClosed);
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
    }
}
