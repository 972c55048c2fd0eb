//! Chrono failures → `ErrorKind` + `Retry` (the table is in `docs/adapters/chrono.md`).

use std::time::Duration;

use execseam_adapter_kit::retry::{self, Call, Sent, Stage};

use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;
use crate::wire::{self, codes};

/// A call of this adapter.
const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// `POST /execute` (and `/execute/stream`): not idempotent; once sent it may have run.
pub(crate) const EXECUTE: Call = call("execute", Stage::Submit);
/// `POST /executions`: idempotent by key; a resend with the **same key** is safe.
pub(crate) const SUBMIT: Call = call("submit", Stage::Before);
/// `GET /executions/{id}`.
pub(crate) const STATUS: Call = call("status", Stage::Before);
/// `GET /executions/{id}/result`.
pub(crate) const RESULT: Call = call("result", Stage::Before);
/// `POST /executions/{id}/cancel`.
pub(crate) const CANCEL: Call = call("cancel", Stage::Before);

/// An unreadable answer: the outcome of an `/execute` is unknown (`Unsafe`); a durable call is
/// repeated with the same key (`Safe`).
pub(crate) fn protocol(call: Call, message: impl Into<String>) -> Error {
    call.error(ErrorKind::Protocol, message)
        .with_retry(call.stage.retry(Sent::Maybe))
}

/// Maps a non-2xx answer (or a 2xx that is not the expected one). The Chrono code is looked for
/// in `error.code`, a top-level `code`, and one level into a NyxID proxy envelope; a code the
/// table does not know falls back to the HTTP status (`NYXID_PROXY_HTTP_<status>`).
pub(crate) fn from_status(
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
    call: Call,
) -> Error {
    // Through NyxID the upstream status may only be in the envelope.
    let status = wire::envelope_status(body).unwrap_or(status);
    let code = wire::error_code(body);
    let message =
        message_of(body).unwrap_or_else(|| {
            match execseam_adapter_kit::excerpt::excerpt(body, 200) {
                Some(text) => format!("HTTP {status}: {text}"),
                None => format!("HTTP {status} with an empty body"),
            }
        });
    let safe_after = Retry::Safe { after: retry_after };
    let (kind, retry) = match (code.as_deref(), status) {
        (Some(codes::IDEMPOTENCY_KEY_MISSING | codes::INVALID_REQUEST), _) => {
            (ErrorKind::InvalidCommand, Retry::Never)
        }
        (Some(codes::EXECUTION_PAYLOAD_TOO_LARGE), _) | (_, 413) => {
            (ErrorKind::InvalidCommand, Retry::Never)
        }
        (Some(codes::IDEMPOTENCY_KEY_REUSE), _) => (ErrorKind::Conflict, Retry::Never),
        (Some(codes::OPERATION_NOT_TERMINAL), _) => (ErrorKind::Conflict, safe_after),
        (Some(codes::UNAUTHENTICATED), _) | (_, 401) => (ErrorKind::Unauthenticated, Retry::Never),
        (Some(codes::FORBIDDEN), _) | (_, 403) => (ErrorKind::PermissionDenied, Retry::Never),
        (Some(codes::OPERATION_NOT_FOUND), _) | (_, 404) => (ErrorKind::NotFound, Retry::Never),
        (Some(codes::OPERATION_EXPIRED), _) | (_, 410) => (ErrorKind::NotFound, Retry::Never),
        // The contract's own refusal before anything ran. A bare 429 (a gateway's, which may
        // have forwarded: issue 38) is Unsafe on the sync execute, Safe on the keyed submit.
        (Some(codes::EXECUTION_CAPACITY_EXCEEDED), _) => (ErrorKind::RateLimited, safe_after),
        (_, 429) => retry::http_status(429, call.stage, retry_after),
        // The asynchronous handler is switched off: retrying cannot help.
        (Some(codes::ASYNC_EXECUTION_UNAVAILABLE), _) => (ErrorKind::Unsupported, Retry::Never),
        // No sandbox was made, so nothing ran.
        (Some(codes::SANDBOX_CREATION_FAILED), _) => (ErrorKind::Unavailable, Retry::SAFE),
        // The server's own deadline (`timeout_secs`) fired: the program ran and was killed.
        (Some(codes::SANDBOX_TIMEOUT), _) => (
            ErrorKind::Timeout(Deadline::Command),
            call.stage.retry(Sent::Maybe),
        ),
        // A public edge gave up on the request (Cloudflare's 524): the program may still run.
        (_, 408 | 504 | 524) => (
            ErrorKind::Timeout(Deadline::Request),
            call.stage.retry(Sent::Maybe),
        ),
        (Some(codes::SANDBOX_UNREACHABLE), _) | (_, 502 | 503) => (
            ErrorKind::Unavailable,
            if call == EXECUTE {
                Retry::Unsafe
            } else {
                safe_after
            },
        ),
        // A 2xx or 3xx that is not the answer the route has.
        (_, 200..=399) => (ErrorKind::Protocol, call.stage.retry(Sent::Maybe)),
        (_, s) => retry::http_status(s, call.stage, retry_after),
    };
    let code = code.unwrap_or_else(|| format!("NYXID_PROXY_HTTP_{status}"));
    call.error(kind, message)
        .with_retry(retry)
        .with_status(WireStatus::Http(status))
        .with_code(code)
}

fn message_of(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let inner = match v.get("body") {
        Some(serde_json::Value::String(s))
            if v.get("error").and_then(|e| e.as_bool()) == Some(true) =>
        {
            serde_json::from_str(s).ok()?
        }
        Some(b @ serde_json::Value::Object(_)) => b.clone(),
        _ => v,
    };
    let e = inner.get("error").unwrap_or(&inner);
    let code = e.get("code").and_then(|c| c.as_str());
    let msg = e.get("message").and_then(|m| m.as_str());
    match (code, msg) {
        (Some(c), Some(m)) => Some(format!("{c}: {m}")),
        (Some(c), None) => Some(c.to_owned()),
        (None, Some(m)) => Some(m.to_owned()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(status: u16, body: &str, op: Call) -> Error {
        from_status(status, None, body.as_bytes(), op)
    }

    fn body(code: &str) -> String {
        format!(
            r#"{{"success":false,"error":{{"code":"{code}","message":"m"}},"diagnostic_id":"d-1"}}"#
        )
    }

    #[test]
    fn a_plain_text_body_is_the_message_trimmed_and_cut() {
        let e = map(502, "  bad gateway\n", EXECUTE);
        assert_eq!(e.message(), "HTTP 502: bad gateway");
        let e = map(502, &"x".repeat(1000), EXECUTE);
        assert_eq!(e.message(), format!("HTTP 502: {}", "x".repeat(200)));
        for blank in ["", " \n"] {
            let e = map(503, blank, EXECUTE);
            assert_eq!(e.message(), "HTTP 503 with an empty body");
        }
    }

    #[test]
    fn the_execute_table() {
        // research/ax-agentcore-chrono.md §3.3 (NyxIdCodeExecutionPortTests, ClassifyProxyFailure).
        let cases: &[(u16, &str, ErrorKind, Retry)] = &[
            (
                401,
                "UNAUTHENTICATED",
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (403, "FORBIDDEN", ErrorKind::PermissionDenied, Retry::Never),
            (
                400,
                "INVALID_REQUEST",
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                504,
                "SANDBOX_TIMEOUT",
                ErrorKind::Timeout(Deadline::Command),
                Retry::Unsafe,
            ),
            (
                502,
                "SANDBOX_CREATION_FAILED",
                ErrorKind::Unavailable,
                Retry::SAFE,
            ),
            (
                503,
                "SANDBOX_UNREACHABLE",
                ErrorKind::Unavailable,
                Retry::Unsafe,
            ),
            (500, "INTERNAL_ERROR", ErrorKind::Internal, Retry::Unsafe),
            (
                429,
                "EXECUTION_CAPACITY_EXCEEDED",
                ErrorKind::RateLimited,
                Retry::SAFE,
            ),
            (
                524,
                "EDGE",
                ErrorKind::Timeout(Deadline::Request),
                Retry::Unsafe,
            ),
        ];
        for (status, code, kind, retry) in cases {
            let e = map(*status, &body(code), EXECUTE);
            assert_eq!(
                (e.kind(), e.retry()),
                (*kind, *retry),
                "{status} {code}: {e}"
            );
            assert_eq!(e.code(), Some(*code));
            assert_eq!(e.status(), Some(WireStatus::Http(*status)));
        }
    }

    #[test]
    fn unknown_codes_fall_back_to_the_status() {
        let e = map(502, "<html>bad gateway</html>", EXECUTE);
        assert_eq!(e.code(), Some("NYXID_PROXY_HTTP_502"));
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        // A 429 without the contract's code (a gateway's, the chaos proxy's) may follow a
        // forwarded execute (issue 38); the keyed durable submit may be repeated.
        let e = map(
            429,
            r#"{"message":"chaos: injected 429","code":429}"#,
            EXECUTE,
        );
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::RateLimited, Retry::Unsafe)
        );
        let e = map(429, "", SUBMIT);
        assert_eq!((e.kind(), e.retry()), (ErrorKind::RateLimited, Retry::SAFE));
    }

    #[test]
    fn nyxid_envelopes_are_looked_into() {
        // ChronoProxyFailureInspector: {"error": true, "status", "body": "<json string>"}.
        let env =
            serde_json::json!({"error": true, "status": 504, "body": body("SANDBOX_TIMEOUT")});
        let e = from_status(502, None, env.to_string().as_bytes(), EXECUTE);
        assert_eq!(e.code(), Some("SANDBOX_TIMEOUT"));
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command));
        assert_eq!(e.status(), Some(WireStatus::Http(504)));
        assert!(e.message().contains("SANDBOX_TIMEOUT: m"), "{e}");
    }

    #[test]
    fn the_durable_table() {
        let cases: &[(u16, &str, Call, ErrorKind, Retry)] = &[
            (
                400,
                "IDEMPOTENCY_KEY_MISSING",
                SUBMIT,
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                409,
                "IDEMPOTENCY_KEY_REUSE",
                SUBMIT,
                ErrorKind::Conflict,
                Retry::Never,
            ),
            (
                503,
                "ASYNC_EXECUTION_UNAVAILABLE",
                SUBMIT,
                ErrorKind::Unsupported,
                Retry::Never,
            ),
            (
                413,
                "EXECUTION_PAYLOAD_TOO_LARGE",
                SUBMIT,
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                503,
                "SANDBOX_UNREACHABLE",
                SUBMIT,
                ErrorKind::Unavailable,
                Retry::SAFE,
            ),
            (
                500,
                "INTERNAL_ERROR",
                SUBMIT,
                ErrorKind::Internal,
                Retry::SAFE,
            ),
            (
                404,
                "OPERATION_NOT_FOUND",
                STATUS,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                410,
                "OPERATION_EXPIRED",
                RESULT,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                409,
                "OPERATION_NOT_TERMINAL",
                RESULT,
                ErrorKind::Conflict,
                Retry::SAFE,
            ),
        ];
        for (status, code, op, kind, retry) in cases {
            let e = map(*status, &body(code), *op);
            assert_eq!(
                (e.kind(), e.retry()),
                (*kind, *retry),
                "{status} {code}: {e}"
            );
        }
    }
}
