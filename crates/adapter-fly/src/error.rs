//! Machines API failures → `ErrorKind` + `Retry`.

use execseam_adapter_kit::http;
use execseam_adapter_kit::retry::{self, Call, Sent, Stage};
use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};
use reqwest::header::HeaderMap;

use crate::PROVIDER;
use crate::wire::ErrorBody;

/// The text the API returns when an exec's output is too large (third-party observation, 2026).
pub(crate) const OUTPUT_LIMIT_TEXT: &str = "exceeds the maximum allowed response size";

/// A call of this adapter.
pub(crate) const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// The exec POST: once sent, the command may have run.
pub(crate) const EXEC: Call = call("exec", Stage::Submit);

/// The create POST: once sent, the machine may exist (issue 38, D17). A failure after the send
/// must not be `Safe`: a retry would make a second machine, and the guard would not look for
/// the first.
pub(crate) const CREATE: Call = call("create", Stage::Submit);

/// A control call (get, start, wait, destroy): nothing runs in the machine.
pub(crate) const fn control(operation: &'static str) -> Call {
    call(operation, Stage::Before)
}

/// The `<code>: <message>` convention of Machines API errors (`deadline_exceeded: …`,
/// `failed_precondition: …`, `invalid_argument: …`).
fn code_of(text: &str) -> Option<&str> {
    let (code, _) = text.split_once(':')?;
    (!code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')).then_some(code)
}

/// Maps a non-2xx answer. `body` is the raw body, parsed leniently (`{"error"}`,
/// `{"status","message"}`, or plain text).
pub(crate) fn from_status(status: u16, headers: &HeaderMap, body: &[u8], call: Call) -> Error {
    let parsed: Option<ErrorBody> = serde_json::from_slice(body).ok();
    let text = parsed
        .as_ref()
        .and_then(|b| b.message.clone().or_else(|| b.error.clone()))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    let text = if text.is_empty() {
        format!("HTTP {status} with an empty body")
    } else {
        text
    };
    let request_id = headers
        .get("fly-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|id| format!(" (request id {id})"))
        .unwrap_or_default();
    let message = format!("{text}{request_id}");
    let code = code_of(&text).map(str::to_owned).or_else(|| {
        parsed
            .as_ref()
            .and_then(|b| b.status.clone())
            .filter(|s| s != "error" && s != "unknown")
    });
    let (kind, retry) = if text.contains(OUTPUT_LIMIT_TEXT) {
        // The command ran; its output was too large to return.
        (ErrorKind::OutputLimit, Retry::Unsafe)
    } else {
        match status {
            400 | 413 | 422 => (ErrorKind::InvalidCommand, Retry::Never),
            401 => (ErrorKind::Unauthenticated, Retry::Never),
            403 => (ErrorKind::PermissionDenied, Retry::Never),
            404 => (ErrorKind::NotFound, Retry::Never),
            408 => match call.stage {
                // The server's own deadline (the exec's `timeout`) fired: the command ran.
                Stage::Submit | Stage::After => {
                    (ErrorKind::Timeout(Deadline::Command), Retry::Unsafe)
                }
                Stage::Before => (ErrorKind::Timeout(Deadline::Request), Retry::SAFE),
            },
            // A lease held by someone else: the request was refused before anything ran.
            409 => (ErrorKind::Conflict, Retry::SAFE),
            // failed_precondition (e.g. the machine is not started): start it first.
            412 => (ErrorKind::Conflict, Retry::Never),
            // The Machines API documents per-action rate limits but not where they are
            // answered, and no 429 body of Fly's is known to recognise: on a submit it may
            // follow a forwarded exec (issue 38), so only a request that runs nothing is Safe.
            429 => retry::http_status(429, call.stage, http::retry_after(headers)),
            502..=504 => (ErrorKind::Unavailable, call.stage.retry(Sent::Maybe)),
            500..=599 => (ErrorKind::Internal, call.stage.retry(Sent::Maybe)),
            _ => (ErrorKind::InvalidCommand, Retry::Never),
        }
    };
    let mut e = call
        .error(kind, message)
        .with_retry(retry)
        .with_status(WireStatus::Http(status));
    if let Some(code) = code {
        e = e.with_code(code);
    }
    e
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn map(status: u16, body: &str) -> Error {
        from_status(status, &HeaderMap::new(), body.as_bytes(), EXEC)
    }

    #[test]
    fn each_status_has_its_kind_and_retry() {
        let cases: &[(u16, &str, ErrorKind, Retry)] = &[
            (
                400,
                r#"{"error":"invalid_argument: bad"}"#,
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                401,
                r#"{"error":"unauthorized"}"#,
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (
                403,
                r#"{"error":"forbidden"}"#,
                ErrorKind::PermissionDenied,
                Retry::Never,
            ),
            (
                404,
                r#"{"error":"machine not found"}"#,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                408,
                r#"{"error":"deadline_exceeded: Post \"http://unix/v1/exec\": net/http: request canceled"}"#,
                ErrorKind::Timeout(Deadline::Command),
                Retry::Unsafe,
            ),
            (
                409,
                r#"{ "status":"error", "message":"machine ID 3d8d413b29d089 lease currently held by a@b.c"}"#,
                ErrorKind::Conflict,
                Retry::SAFE,
            ),
            (
                412,
                r#"{"error":"failed_precondition: machine is not started"}"#,
                ErrorKind::Conflict,
                Retry::Never,
            ),
            // No known signature of Fly's own 429: the exec may have run (issue 38).
            (
                429,
                r#"{"error":"rate limited"}"#,
                ErrorKind::RateLimited,
                Retry::Unsafe,
            ),
            (
                500,
                r#"{"error":"internal"}"#,
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (502, "bad gateway", ErrorKind::Unavailable, Retry::Unsafe),
            (503, "", ErrorKind::Unavailable, Retry::Unsafe),
            (504, "", ErrorKind::Unavailable, Retry::Unsafe),
        ];
        for (status, body, kind, retry) in cases {
            let e = map(*status, body);
            assert_eq!(
                (e.kind(), e.retry()),
                (*kind, *retry),
                "{status} {body}: {e}"
            );
            assert_eq!(e.status(), Some(WireStatus::Http(*status)));
            assert_eq!(e.provider(), "fly");
        }
    }

    #[test]
    fn message_wins_over_error_and_codes_are_extracted() {
        let e = map(409, r#"{"error":"x","message":"lease currently held"}"#);
        assert_eq!(e.message(), "lease currently held");
        let e = map(408, r#"{"error":"deadline_exceeded: Post ..."}"#);
        assert_eq!(e.code(), Some("deadline_exceeded"));
        let e = map(
            400,
            r#"{"error":"capacity","status":"insufficient_capacity"}"#,
        );
        assert_eq!(e.code(), Some("insufficient_capacity"));
        let e = map(500, "not json at all");
        assert_eq!(e.message(), "not json at all");
    }

    #[test]
    fn the_output_limit_is_its_own_kind_whatever_the_status() {
        for status in [400, 413, 500] {
            let e = map(
                status,
                r#"{"error":"exec output exceeds the maximum allowed response size after JSON encoding (10485760 byte limit)"}"#,
            );
            assert_eq!(
                (e.kind(), e.retry()),
                (ErrorKind::OutputLimit, Retry::Unsafe)
            );
        }
    }

    #[test]
    fn retry_after_and_request_id_are_kept() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        h.insert("fly-request-id", "01JJ-fra".parse().unwrap());
        let e = from_status(429, &h, b"{}", EXEC);
        assert_eq!(e.retry(), Retry::Unsafe);
        assert!(e.message().contains("01JJ-fra"), "{e}");
        let e = from_status(429, &h, b"{}", EXEC.at(Stage::Before));
        assert_eq!(
            e.retry(),
            Retry::Safe {
                after: Some(Duration::from_secs(7))
            }
        );
        assert!(e.message().contains("01JJ-fra"), "{e}");
    }

    #[test]
    fn a_create_that_failed_after_its_send_is_not_safe() {
        // Issue 38, D17: the machine may exist; `Safe` would retry it into a second one.
        for status in [500, 502, 503, 504] {
            let e = from_status(status, &HeaderMap::new(), b"{}", CREATE);
            assert!(!matches!(e.retry(), Retry::Safe { .. }), "{status}: {e:?}");
        }
    }
}
