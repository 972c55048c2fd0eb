//! Sprites API failures → `ErrorKind` + `Retry`.

use std::time::Duration;

use execseam_adapter_kit::retry::{self, Call, Sent, Stage};
use execseam_adapter_kit::{http, ws};

use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};
use reqwest::header::HeaderMap;

use crate::PROVIDER;
use crate::wire::ApiError;

/// What observed production answers for a sprite that does not exist (HTTP 500).
pub(crate) const UNKNOWN_SPRITE_TEXT: &str = "failed to retrieve sprite";

/// A call of this adapter.
pub(crate) const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// An exec request: once sent, the command may have run.
pub(crate) const EXEC: Call = call("exec", Stage::Submit);

/// The sprite's create (`POST /v1/sprites`): once sent, the sprite may exist (issue 38, D17:
/// it was `Stage::Before`, so a cut after the send was `Retry::Safe`, never swept, and a retry
/// answered 409 for the sprite the first request had made).
pub(crate) const CREATE: Call = call("create", Stage::Submit);

/// Anything else (kill, probe, files, lifecycle): nothing new runs.
pub(crate) const fn control(operation: &'static str) -> Call {
    call(operation, Stage::Before)
}

/// Maps a non-success answer (a refused WebSocket upgrade, a failed POST).
pub(crate) fn from_status(status: u16, headers: &HeaderMap, body: &[u8], call: Call) -> Error {
    let parsed: Option<ApiError> = serde_json::from_slice(body).ok();
    let raw = String::from_utf8_lossy(body).trim().to_owned();
    let text = parsed
        .as_ref()
        .and_then(|b| match (&b.error, &b.message) {
            (Some(e), Some(m)) => Some(format!("{e}: {m}")),
            (Some(e), None) => Some(e.clone()),
            (None, Some(m)) => Some(m.clone()),
            (None, None) => None,
        })
        .unwrap_or_else(|| raw.clone());
    let text = if text.is_empty() {
        format!("HTTP {status} with an empty body")
    } else {
        text
    };
    // A machine code (`sprite_creation_rate_limited`) is kept as the provider's code.
    let code = parsed
        .as_ref()
        .and_then(|b| b.error.clone())
        .filter(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    let (kind, retry) = match status {
        400 | 413 | 414 | 422 => (ErrorKind::InvalidCommand, Retry::Never),
        401 => (ErrorKind::Unauthenticated, Retry::Never),
        403 => (ErrorKind::PermissionDenied, Retry::Never),
        // 404 for a sprite (or session) that does not exist; 410 for a session that ended.
        404 | 410 => (ErrorKind::NotFound, Retry::Never),
        408 => (
            ErrorKind::Timeout(Deadline::Request),
            call.stage.retry(Sent::Maybe),
        ),
        409 => (ErrorKind::Conflict, Retry::SAFE),
        429 => {
            let after = http::retry_after(headers).or_else(|| {
                parsed
                    .as_ref()
                    .and_then(|b| b.retry_after_seconds)
                    .map(Duration::from_secs)
            });
            // Safe only as Sprites' own refusal: an `APIError` whose code names a limit
            // (sprites-go `errors.go`: `sprite_creation_rate_limited`,
            // `concurrent_sprite_limit_exceeded`). A bare 429 may follow a forwarded exec
            // (issue 38).
            let own = code
                .as_deref()
                .is_some_and(|c| c.ends_with("_rate_limited") || c.ends_with("_limit_exceeded"));
            retry::signed(429, call.stage, after, own)
        }
        // Observed: an unknown sprite is a 500 with this text, before anything runs.
        500 if text.contains(UNKNOWN_SPRITE_TEXT) => (ErrorKind::NotFound, Retry::Never),
        502..=504 => (ErrorKind::Unavailable, call.stage.retry(Sent::Maybe)),
        500..=599 => (ErrorKind::Internal, call.stage.retry(Sent::Maybe)),
        // A 1xx, 2xx or 3xx where the upgrade (or an answer of another status) was due: not
        // the command's fault, and a proxy may have forwarded it (issue 38: a 204 was typed
        // InvalidCommand, and the CLI exited 2).
        100..=399 => (ErrorKind::Protocol, call.stage.retry(Sent::Maybe)),
        _ => (ErrorKind::InvalidCommand, Retry::Never),
    };
    let mut e = call
        .error(kind, text)
        .with_retry(retry)
        .with_status(WireStatus::Http(status));
    if let Some(code) = code {
        e = e.with_code(code);
    }
    e
}

/// A WebSocket read error of a running command: a frame over the size limit (MAX_WS_FRAME) or
/// a broken frame is `Protocol`, anything else a lost connection (both `Retry::Unsafe`: the
/// command ran).
pub(crate) fn ws_read(e: &tokio_websockets::Error) -> Error {
    ws::frame_error(EXEC.at(Stage::After), e)
}

/// The connection of a running command was lost before its exit frame.
pub(crate) fn lost(what: impl std::fmt::Display) -> Error {
    EXEC.error(
        ErrorKind::Unavailable,
        format!("the connection was lost before the exit frame: {what}"),
    )
    .with_retry(Retry::Unsafe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(status: u16, body: &str) -> Error {
        from_status(status, &HeaderMap::new(), body.as_bytes(), EXEC)
    }

    /// A frame over the limit (an endless answer) is `Protocol`, not a lost connection; a lost
    /// connection stays `Unavailable`; both `Unsafe` (the command was submitted).
    #[test]
    fn an_oversized_frame_is_protocol() {
        let e = ws_read(&tokio_websockets::Error::PayloadTooLong {
            len: 1 << 40,
            max_len: crate::client::MAX_WS_FRAME,
        });
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert_eq!(e.retry(), Retry::Unsafe);
        assert!(e.to_string().contains("67108864-byte frame limit"), "{e}");
        let e = ws_read(&tokio_websockets::Error::AlreadyClosed);
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert_eq!(e.retry(), Retry::Unsafe);
    }

    #[test]
    fn observed_and_documented_errors() {
        let cases: &[(u16, &str, ErrorKind, Retry)] = &[
            (
                401,
                r#"{"error":"authentication failed"}"#,
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (
                404,
                r#"{"error":"sprite not found"}"#,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                500,
                r#"{"error":"failed to retrieve sprite"}"#,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                500,
                r#"{"error":"internal server error"}"#,
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                500,
                "failed to start process",
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                400,
                "No command specified",
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (503, "", ErrorKind::Unavailable, Retry::Unsafe),
            // A bare 429 on the exec, or another code: it may have run (issue 38).
            (429, "", ErrorKind::RateLimited, Retry::Unsafe),
            (
                429,
                r#"{"error":"internal","message":"slow down"}"#,
                ErrorKind::RateLimited,
                Retry::Unsafe,
            ),
            // Where the upgrade was due (a proxy may have forwarded it).
            (204, "", ErrorKind::Protocol, Retry::Unsafe),
            (200, "{}", ErrorKind::Protocol, Retry::Unsafe),
            (
                429,
                r#"{"error":"sprite_creation_rate_limited","message":"slow down"}"#,
                ErrorKind::RateLimited,
                Retry::SAFE,
            ),
        ];
        for (status, body, kind, retry) in cases {
            let e = map(*status, body);
            assert_eq!(
                (e.kind(), e.retry()),
                (*kind, *retry),
                "{status} {body}: {e}"
            );
            assert_eq!(e.provider(), "sprites");
            assert_eq!(e.status(), Some(WireStatus::Http(*status)));
        }
    }

    #[test]
    fn retry_after_comes_from_the_header_or_the_body() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        let e = from_status(429, &h, b"{}", EXEC.at(Stage::Before));
        assert_eq!(e.retry().after(), Some(Duration::from_secs(3)));
        let e = map(
            429,
            r#"{"error":"concurrent_sprite_limit_exceeded","retry_after_seconds":9}"#,
        );
        assert_eq!(e.retry().after(), Some(Duration::from_secs(9)));
        assert_eq!(e.code(), Some("concurrent_sprite_limit_exceeded"));
    }
}
