//! Every failure as an [`Error`] with a kind and a retry class, through the kit's classification
//! helpers. The command travels in the `init` frame, after the upgrade: what failed before it
//! was sent cannot have run.
//!
//! | failure | kind, retry |
//! |---|---|
//! | the upgrade refused with a status (`429`, `503`, `404`, …) | the status's kind; `Safe` for 429/5xx (the `init` frame was never sent) |
//! | no connection, or it broke before the upgrade completed | `Unavailable`, `Safe` |
//! | `init` answered with `auth` ≠ `"successful"` | `Unauthenticated`, `Never` |
//! | an `error` frame before the `init` reply (bad instance, container, user) | `InvalidCommand`, `Never` |
//! | an `error` frame after it | `Internal`, `Unsafe` (the command may have run) |
//! | the socket closed, or broke, before the `completion` frame | `Unavailable`, `Unsafe` |
//! | a frame the clients would reject (bad JSON, unknown type, `exitCode` not a number) | `Protocol`, `Unsafe` |
//! | REST: `{"error":{"status","message"}}` with its status | the status's kind |

use execseam_adapter_kit::http;
use execseam_adapter_kit::retry::{self, Call, Sent, Stage};
use execseam_core::{Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;

/// A call of this adapter: REST calls and the exec until its `init` frame is sent are
/// [`Stage::Before`]; from the `init` frame on, [`Stage::Submit`].
pub(crate) const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// What failed, before it is classified.
#[derive(Debug)]
pub(crate) enum CallError {
    /// An HTTP error status (REST, or the refused upgrade) and its message.
    Http {
        status: u16,
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// `init` came back with `auth` ≠ `"successful"`.
    AuthFailed(String),
    /// An `error` frame; `started`: after the `init` reply.
    Frame { message: String, started: bool },
    /// The socket closed or broke before the completion.
    Closed(String),
    /// A frame or body the clients would reject.
    Protocol(String),
}

impl CallError {
    pub(crate) fn http(
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) -> CallError {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let message = v["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        let retry_after = http::retry_after(headers);
        CallError::Http {
            status,
            message,
            retry_after,
        }
    }
}

/// Classifies `e` for `call` (an exec is [`Stage::Submit`] from the `init` frame on).
pub(crate) fn map(e: CallError, call: Call) -> Error {
    let base = |kind: ErrorKind, retry: Retry, message: String| {
        call.error(kind, message).with_retry(retry)
    };
    let after_send = call.stage.retry(Sent::Maybe);
    match e {
        CallError::Http {
            status,
            message,
            retry_after,
        } => {
            let (kind, retry) = retry::http_status(status, call.stage, retry_after);
            base(kind, retry, format!("{status}: {message}")).with_status(WireStatus::Http(status))
        }
        CallError::AuthFailed(m) => base(
            ErrorKind::Unauthenticated,
            Retry::Never,
            format!("the exec handshake was refused: {m}"),
        ),
        CallError::Frame {
            message,
            started: false,
        } => base(
            ErrorKind::InvalidCommand,
            Retry::Never,
            format!("the exec proxy refused the command: {message}"),
        ),
        CallError::Frame {
            message,
            started: true,
        } => base(
            ErrorKind::Internal,
            after_send,
            format!("the exec proxy reported an error: {message}"),
        ),
        CallError::Closed(m) => base(ErrorKind::Unavailable, after_send, m),
        CallError::Protocol(m) => base(ErrorKind::Protocol, after_send, m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_before_the_init_frame_are_safe_and_after_it_unsafe() {
        let h = reqwest::header::HeaderMap::new();
        let e = map(
            CallError::http(503, &h, br#"{"error":{"status":503,"message":"down"}}"#),
            call("exec", Stage::Before),
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE));
        assert_eq!(e.message(), "503: down");
        let after_the_init = [
            (
                CallError::AuthFailed("bad".into()),
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (
                CallError::Closed("gone".into()),
                ErrorKind::Unavailable,
                Retry::Unsafe,
            ),
            (
                CallError::Frame {
                    message: "x".into(),
                    started: true,
                },
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                CallError::Protocol("x".into()),
                ErrorKind::Protocol,
                Retry::Unsafe,
            ),
        ];
        for (failure, kind, retry) in after_the_init {
            let shown = format!("{failure:?}");
            let e = map(failure, call("exec", Stage::Submit));
            assert_eq!((e.kind(), e.retry()), (kind, retry), "{shown}");
        }
    }
}
