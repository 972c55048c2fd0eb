//! Daytona's errors mapped to [`ErrorKind`] and [`Retry`].
//!
//! Every Daytona component answers errors with the same envelope,
//! `{"statusCode", "message", "code"?, "source"?, "timestamp", "path", "method"?}`: the API
//! (`source: DAYTONA_API`), the toolbox proxy (`DAYTONA_PROXY`: `SANDBOX_NOT_FOUND` 404,
//! `SANDBOX_NOT_STARTED` 400, `RUNNER_UNREACHABLE` 502) and the daemon (`DAYTONA_DAEMON`:
//! `FILE_NOT_FOUND`, `PROCESS_EXECUTION_TIMEOUT`, `SESSION_ENDED`, …). Old daemons send some
//! errors with an empty body; the status alone decides then.
//!
//! The retry class depends on the [`Stage`]: before the request that runs the command, nothing
//! ran and a retry is safe where the status allows; from that request on, the command may have
//! run, and every failure but a rejection (400, 401, 403, 404, 409) is [`Retry::Unsafe`]. A 429
//! there is `Safe` only when it is the API's throttler (NestJS `ThrottlerException`, a guard
//! that runs before any handler) or carries a Daytona component's `source`: the toolbox proxy
//! itself has no rate limiter (`apps/proxy/pkg/proxy/proxy.go` hands every request to
//! `httputil.ReverseProxy`), so a bare 429 may come from anything after it (issue 38, D21).

use execseam_adapter_kit::http;
use execseam_adapter_kit::retry::{self, Call, Stage};

use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};
use reqwest::header::HeaderMap;

use crate::wire::ErrorResponse;

pub use crate::PROVIDER;

/// A call of this adapter. The [`Stage`] decides the retry class: before the request that runs
/// the command, nothing ran and a retry is safe where the status allows; from that request on,
/// the command may have run; after it, nothing is `Safe`.
pub(crate) const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// Maps an HTTP error answer.
pub(crate) fn from_response(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    operation: &'static str,
    stage: Stage,
) -> Error {
    let envelope: ErrorResponse = serde_json::from_slice(body).unwrap_or_default();
    let code = envelope.code.clone().filter(|c| !c.is_empty());
    let mut text = envelope
        .text()
        .or_else(|| execseam_adapter_kit::excerpt::excerpt(body, 300))
        .unwrap_or_else(|| format!("HTTP {status} with an empty body"));
    if let Some(src) = &envelope.source {
        text = format!("{text} (from {src})");
    }
    let after = http::retry_after(headers);
    let submitted = stage != Stage::Before;
    let unsafe_or = |safe: Retry| if submitted { Retry::Unsafe } else { safe };
    let code_is = |c: &str| code.as_deref() == Some(c);
    let (kind, retry) = match status {
        400 if code_is("SANDBOX_NOT_STARTED") => (ErrorKind::Unavailable, Retry::Never),
        // v0.190 daemons answer a session that died under a running command with this 400.
        400 if submitted && text.contains("session cancelled") => {
            (ErrorKind::Unavailable, Retry::Unsafe)
        }
        // Older proxies answer an unknown sandbox with this 400 (newer: 404 SANDBOX_NOT_FOUND).
        400 if text.contains("failed to get runner info") => (ErrorKind::NotFound, Retry::Never),
        // The runner finds no address for a stopped or archived sandbox (runner
        // `pkg/api/controllers/proxy.go` `getProxyTarget`): refused before anything ran.
        400 if text.contains("Is the Sandbox started?") => (ErrorKind::Conflict, Retry::Never),
        // Create from a snapshot the organization does not have (`sandbox.service.ts` create:
        // "Snapshot … not found. Did you add it through the Daytona Dashboard?").
        400 if text.starts_with("Snapshot ") && text.contains(" not found") => {
            (ErrorKind::NotFound, Retry::Never)
        }
        // The adapter never sends an invalid exec: a 400 there (v0.190 daemons answer failures to
        // read the exit code that way) may follow a run.
        400 | 422 if submitted => (ErrorKind::Internal, Retry::Unsafe),
        400 | 422 => (ErrorKind::InvalidCommand, Retry::Never),
        401 => (ErrorKind::Unauthenticated, Retry::Never),
        403 => (ErrorKind::PermissionDenied, Retry::Never),
        404 => (ErrorKind::NotFound, Retry::Never),
        408 => {
            let deadline = if code_is("PROCESS_EXECUTION_TIMEOUT") {
                Deadline::Command
            } else {
                Deadline::Unknown
            };
            (ErrorKind::Timeout(deadline), unsafe_or(Retry::SAFE))
        }
        409 => (ErrorKind::Conflict, Retry::Never),
        // SESSION_ENDED, COMMAND_ALREADY_COMPLETED: the shell that ran the command is gone.
        410 => (ErrorKind::Unavailable, unsafe_or(Retry::SAFE)),
        429 if submitted && !daytona_own(&envelope, &text) => {
            (ErrorKind::RateLimited, Retry::Unsafe)
        }
        429 => (ErrorKind::RateLimited, Retry::Safe { after }),
        502..=504 => (ErrorKind::Unavailable, unsafe_or(Retry::Safe { after })),
        500..=599 => (ErrorKind::Internal, unsafe_or(Retry::SAFE)),
        _ => (ErrorKind::Internal, Retry::Never),
    };
    let retry = if stage == Stage::After {
        retry::after_submit_class(retry)
    } else {
        retry
    };
    let mut e = Error::new(kind, text)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(operation)
        .with_status(WireStatus::Http(status));
    if let Some(code) = code {
        e = e.with_code(code);
    }
    if kind == ErrorKind::Conflict && e.message().contains("Is the Sandbox started?") {
        e = e.with_sandbox_state(execseam_core::SandboxState::Stopped);
    }
    e
}

/// A refusal Daytona's own front answered before anything was forwarded: the API's throttler,
/// or an envelope that names the API or the proxy as its source.
fn daytona_own(envelope: &ErrorResponse, text: &str) -> bool {
    text.starts_with("ThrottlerException")
        || matches!(
            envelope.source.as_deref(),
            Some("DAYTONA_API" | "DAYTONA_PROXY")
        )
}

/// Maps a transport failure (no HTTP answer, or a broken body) with the kit's classification.
pub(crate) fn from_transport(err: reqwest::Error, operation: &'static str, stage: Stage) -> Error {
    http::transport_error(call(operation, stage), err)
}

/// A malformed or truncated answer: the command's fate is unknown.
pub(crate) fn protocol(operation: &'static str, msg: impl Into<String>) -> Error {
    Error::protocol(msg)
        .with_provider(PROVIDER)
        .with_operation(operation)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    fn map(status: u16, body: &str, stage: Stage) -> Error {
        from_response(status, &HeaderMap::new(), body.as_bytes(), "exec", stage)
    }

    /// A 429 or a 503 on the log follow, the status poll or the log read comes after the
    /// command was submitted: retrying the exec would run it twice.
    #[test]
    fn nothing_after_the_submit_is_safe() {
        for status in [429, 503, 502, 408, 410, 500] {
            let e = map(status, "", Stage::After);
            assert_eq!(e.retry(), Retry::Unsafe, "{status}: {e}");
        }
        // A bare 429 on the submit may come from anything behind the proxy (which has no
        // rate limiter): the command may have run. The throttler's own is a refusal.
        assert_eq!(map(429, "", Stage::Submit).retry(), Retry::Unsafe);
        assert_eq!(
            map(
                429,
                r#"{"message":"chaos: injected 429","code":429}"#,
                Stage::Submit
            )
            .retry(),
            Retry::Unsafe
        );
        assert_eq!(
            map(
                429,
                r#"{"statusCode":429,"message":"ThrottlerException: Too Many Requests"}"#,
                Stage::Submit
            )
            .retry(),
            Retry::SAFE,
            "the API's throttler ran nothing"
        );
        assert_eq!(map(429, "", Stage::Before).retry(), Retry::SAFE);
        assert_eq!(map(404, "", Stage::After).retry(), Retry::Never);
    }

    #[test]
    fn each_status_maps_to_a_kind_and_retry_class() {
        use ErrorKind as K;
        let cases: Vec<(u16, &str, Stage, ErrorKind, Retry)> = vec![
            (
                400,
                r#"{"statusCode":400,"message":"bad request: invalid mode format","code":"BAD_REQUEST"}"#,
                Stage::Before,
                K::InvalidCommand,
                Retry::Never,
            ),
            (
                400,
                r#"{"statusCode":400,"message":"failed to read exit code file: EIO","code":"BAD_REQUEST"}"#,
                Stage::Submit,
                K::Internal,
                Retry::Unsafe,
            ),
            (
                400,
                r#"{"statusCode":400,"message":"failed to get runner info: 404 Not Found"}"#,
                Stage::Before,
                K::NotFound,
                Retry::Never,
            ),
            (
                400,
                r#"{"statusCode":400,"message":"sandbox is not running","code":"SANDBOX_NOT_STARTED","source":"DAYTONA_PROXY"}"#,
                Stage::Before,
                K::Unavailable,
                Retry::Never,
            ),
            (
                400,
                r#"{"statusCode":400,"message":"bad request: no IP address found. Is the Sandbox started?","code":"BAD_REQUEST","source":"DAYTONA_RUNNER"}"#,
                Stage::Submit,
                K::Conflict,
                Retry::Never,
            ),
            (
                400,
                r#"{"statusCode":400,"message":"Snapshot gone-1 not found. Did you add it through the Daytona Dashboard?","code":"BAD_REQUEST"}"#,
                Stage::Before,
                K::NotFound,
                Retry::Never,
            ),
            (
                400,
                r#"{"statusCode":400,"message":"session cancelled"}"#,
                Stage::Submit,
                K::Unavailable,
                Retry::Unsafe,
            ),
            (
                401,
                r#"{"statusCode":401,"message":"Unauthorized"}"#,
                Stage::Submit,
                K::Unauthenticated,
                Retry::Never,
            ),
            (403, "", Stage::Before, K::PermissionDenied, Retry::Never),
            (
                404,
                r#"{"statusCode":404,"message":"Sandbox with ID or name x not found","code":"SANDBOX_NOT_FOUND","source":"DAYTONA_PROXY"}"#,
                Stage::Before,
                K::NotFound,
                Retry::Never,
            ),
            (
                408,
                r#"{"statusCode":408,"message":"command execution timeout","code":"PROCESS_EXECUTION_TIMEOUT","source":"DAYTONA_DAEMON"}"#,
                Stage::Submit,
                K::Timeout(Deadline::Command),
                Retry::Unsafe,
            ),
            (
                408,
                r#"{"statusCode":408,"message":"command execution timeout","code":"REQUEST_TIMEOUT"}"#,
                Stage::Submit,
                K::Timeout(Deadline::Unknown),
                Retry::Unsafe,
            ),
            (
                409,
                r#"{"statusCode":409,"message":"conflict: session already exists","code":"CONFLICT"}"#,
                Stage::Before,
                K::Conflict,
                Retry::Never,
            ),
            (
                410,
                r#"{"statusCode":410,"message":"session ended","code":"SESSION_ENDED","source":"DAYTONA_DAEMON"}"#,
                Stage::Submit,
                K::Unavailable,
                Retry::Unsafe,
            ),
            (
                500,
                r#"{"statusCode":500,"message":"boom"}"#,
                Stage::Submit,
                K::Internal,
                Retry::Unsafe,
            ),
            (
                500,
                r#"{"statusCode":500,"message":"boom"}"#,
                Stage::Before,
                K::Internal,
                Retry::SAFE,
            ),
            (
                502,
                r#"{"statusCode":502,"message":"runner is unreachable","code":"RUNNER_UNREACHABLE","source":"DAYTONA_PROXY"}"#,
                Stage::Submit,
                K::Unavailable,
                Retry::Unsafe,
            ),
            (
                503,
                "<html>503</html>",
                Stage::Before,
                K::Unavailable,
                Retry::SAFE,
            ),
        ];
        for (status, body, stage, kind, retry) in cases {
            let e = map(status, body, stage);
            assert_eq!((e.kind(), e.retry()), (kind, retry), "{status} {body}: {e}");
            assert_eq!(e.status(), Some(WireStatus::Http(status)));
            assert_eq!(e.provider(), "daytona");
            // A stopped sandbox's refusal says which state it is in (the paused-sandbox rule).
            let want = body
                .contains("Is the Sandbox started?")
                .then_some(execseam_core::SandboxState::Stopped);
            assert_eq!(e.sandbox_state(), want, "{body}");
        }
    }

    #[test]
    fn rate_limits_carry_retry_after_even_on_the_exec_request() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        let e = from_response(
            429,
            &h,
            br#"{"statusCode":429,"message":"ThrottlerException: Too Many Requests"}"#,
            "exec",
            Stage::Submit,
        );
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert_eq!(
            e.retry(),
            Retry::Safe {
                after: Some(Duration::from_secs(3))
            }
        );
    }

    #[test]
    fn the_code_and_source_are_kept() {
        let e = map(
            404,
            r#"{"statusCode":404,"message":"file not found: /x","code":"FILE_NOT_FOUND","source":"DAYTONA_DAEMON"}"#,
            Stage::Before,
        );
        assert_eq!(e.code(), Some("FILE_NOT_FOUND"));
        assert!(e.message().contains("DAYTONA_DAEMON"));
        assert!(e.message().contains("file not found: /x"));
    }
}
