//! Every failure as an [`Error`] with a kind and a retry class, through the kit's classification
//! helpers. What differs from their defaults, and why:
//!
//! | answer | kind, retry | source |
//! |---|---|---|
//! | `403 {"error":{"code":"forbidden","invalidToken":true}}` | `Unauthenticated`, `Never` | Vercel's API answers a bad token with 403, not 401 |
//! | `403` otherwise | `PermissionDenied`, `Never` | |
//! | `400` on `POST …/cmd` saying the working directory does not exist | `NotFound`, `Never` | the command never started |
//! | `410 sandbox_stopped`, `422 sandbox_stopping` | resumed once (`GET /v2/sandboxes/{name}?resume=true`), as the SDKs' `withResume` does; then `NotFound` | `sandbox.ts` |
//! | an in-band `{"stream":"error"}` line | `Unavailable`, `Unsafe` (the command was running) | `api-client.ts` `StreamError` |
//! | a stream that ends before the final `{command}` | `Unavailable`, `Unsafe` | the SDK's `stream_ended_early` |
//! | a line that is not the SDK's NDJSON | `Protocol`, `Unsafe` | |
//!
//! A `POST …/cmd` is never retried by this adapter (the TS SDK's `withRetry` does retry it on
//! 5xx and can run a command twice; the Python SDK does not).

use std::time::Duration;

use execseam_adapter_kit::http::{self, BodyError};
use execseam_adapter_kit::retry::{self, Call, NoAnswer, Sent, Stage};
use execseam_core::{Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;

/// A call of this adapter.
pub(crate) const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}
use crate::wire::ErrorBody;

/// A failed call, before it is classified.
#[derive(Debug)]
pub(crate) enum CallError {
    /// An error status and the API's `{"error":{"code","message"}}`.
    Http {
        status: u16,
        code: String,
        message: String,
        invalid_token: bool,
        retry_after: Option<Duration>,
    },
    /// The request failed in transport.
    Transport(reqwest::Error),
    /// A body could not be read whole (too large, past its deadline, cut).
    Body(BodyError),
    /// The answer is not what the API sends.
    Protocol(String),
    /// The stream ended before its final line.
    Cut(String),
    /// An in-band `{"stream":"error"}` line.
    Stream { code: String, message: String },
}

impl CallError {
    pub(crate) fn http(
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) -> CallError {
        let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
        let invalid_token = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["error"]["invalidToken"].as_bool())
            .unwrap_or(false);
        let retry_after = http::retry_after(headers);
        let message = if parsed.error.message.is_empty() {
            String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
        } else {
            parsed.error.message
        };
        CallError::Http {
            status,
            code: parsed.error.code,
            message,
            invalid_token,
            retry_after,
        }
    }

    /// `410 sandbox_stopped`, `422 sandbox_stopping`/`sandbox_snapshotting`: the SDKs resume.
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self, CallError::Http { status: 410, .. })
            || matches!(self, CallError::Http { status: 422, code, .. }
                if code == "sandbox_stopping" || code == "sandbox_snapshotting")
    }

    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, CallError::Http { status: 404, .. })
    }
}

/// Classifies `e` for `call`.
pub(crate) fn map(e: CallError, call: Call) -> Error {
    let base = |kind: ErrorKind, retry: Retry, message: String| {
        call.error(kind, message).with_retry(retry)
    };
    let op = call.operation;
    match e {
        CallError::Http {
            status,
            code,
            message,
            invalid_token,
            retry_after,
        } => {
            let (mut kind, mut retry) = retry::http_status(status, call.stage, retry_after);
            if status == 403 && invalid_token {
                (kind, retry) = (ErrorKind::Unauthenticated, Retry::Never);
            }
            if status == 400 && op == "exec" && is_missing_dir(&message) {
                (kind, retry) = (ErrorKind::NotFound, Retry::Never);
            }
            let mut err = base(kind, retry, format!("{status} {code}: {message}"))
                .with_status(WireStatus::Http(status));
            if !code.is_empty() {
                err = err.with_code(code);
            }
            err
        }
        CallError::Transport(t) => http::transport_error(call, t),
        CallError::Body(b) => b.into_error(call),
        CallError::Protocol(m) => call.no_answer(NoAnswer::Malformed, m),
        CallError::Cut(m) => call.no_answer(NoAnswer::Cut, m),
        CallError::Stream { code, message } => {
            let retry = call.stage.retry(Sent::Maybe);
            base(
                ErrorKind::Unavailable,
                retry,
                format!("the command's stream failed: {code}: {message}"),
            )
            .with_code(code)
        }
    }
}

fn is_missing_dir(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("working directory") || m.contains("cwd"))
        && (m.contains("does not exist") || m.contains("no such file") || m.contains("not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, body: &str) -> CallError {
        CallError::http(status, &reqwest::header::HeaderMap::new(), body.as_bytes())
    }

    #[test]
    fn the_api_answers_map_as_documented() {
        let e = map(
            http(
                403,
                r#"{"error":{"code":"forbidden","message":"Not authorized","invalidToken":true}}"#,
            ),
            call("exec", Stage::Submit),
        );
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unauthenticated, Retry::Never)
        );
        let e = map(
            http(403, r#"{"error":{"code":"forbidden","message":"no"}}"#),
            call("exec", Stage::Submit),
        );
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        let e = map(
            http(
                400,
                r#"{"error":{"code":"bad_request","message":"The working directory \"/x\" does not exist"}}"#,
            ),
            call("exec", Stage::Submit),
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = map(
            http(
                500,
                r#"{"error":{"code":"internal_server_error","message":"x"}}"#,
            ),
            call("exec", Stage::Submit),
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Internal, Retry::Unsafe));
        assert_eq!(e.code(), Some("internal_server_error"));
        let e = map(CallError::Cut("ended".into()), call("exec", Stage::Submit));
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        let e = map(
            CallError::Protocol("bad".into()),
            call("exec", Stage::Submit),
        );
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert!(http(410, r#"{"error":{"code":"sandbox_stopped","message":"m"}}"#).is_stopped());
        assert!(!http(404, "{}").is_stopped());
    }
}
