//! Bridge errors (and the sandbox container's `ErrorCode`s, where a bridge passes one through)
//! mapped to [`ErrorKind`] and [`Retry`].
//!
//! The bridge reports errors two ways: a JSON `{"error","code"}` body with a 4xx/5xx status
//! *before* the exec stream starts, and an SSE `error` event *inside* it. Which one, and the stage
//! of the request, decide the retry class: nothing can have run before the bridge resolved the
//! sandbox's container (`capacity_exceeded`, `pool_error` are safe to retry), while anything that
//! goes wrong after the exec was accepted may have run the command (`Retry::Unsafe`).

use std::time::Duration;

use execseam_adapter_kit::retry::{self, Call, Sent, Stage};

use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;
use crate::wire::ErrorResponse;

fn err(kind: ErrorKind, message: impl Into<String>, operation: &'static str) -> Error {
    Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_operation(operation)
}

/// Messages of the Containers runtime when it cannot admit a container (from the SDK's
/// `CONTAINER_UNAVAILABLE_SIGNATURES`): the command never started.
const CONTAINER_UNAVAILABLE_SIGNATURES: &[&str] = &[
    "there is no container instance that can be provided to this durable object",
    "there is no container instance available at this time",
    "maximum number of running container instances exceeded",
];

/// True if `message` is one of the runtime's container-admission failures.
pub fn is_container_unavailable(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    CONTAINER_UNAVAILABLE_SIGNATURES
        .iter()
        .any(|s| m.contains(s))
}

/// The kind and retry class of one of the container's 68 `ErrorCode`s (by the SDK's
/// `status-map.ts`), or `None` for a code it does not define.
pub fn container_code(code: &str) -> Option<(ErrorKind, Retry)> {
    use ErrorKind::*;
    let never = Retry::Never;
    Some(match code {
        // 400
        "IS_DIRECTORY"
        | "NOT_DIRECTORY"
        | "NAME_TOO_LONG"
        | "INVALID_COMMAND"
        | "INVALID_PORT_NUMBER"
        | "INVALID_PORT"
        | "CUSTOM_DOMAIN_REQUIRED"
        | "INVALID_GIT_URL"
        | "MISSING_CREDENTIALS"
        | "INVALID_MOUNT_CONFIG"
        | "BACKUP_EXPIRED"
        | "INVALID_BACKUP_CONFIG"
        | "VALIDATION_FAILED" => (InvalidCommand, never),
        "INVALID_JSON_RESPONSE" => (Protocol, Retry::Unsafe),
        // 401
        "GIT_AUTH_FAILED" => (Unauthenticated, never),
        // 403
        "PERMISSION_DENIED"
        | "READ_ONLY"
        | "COMMAND_PERMISSION_DENIED"
        | "PROCESS_PERMISSION_DENIED" => (PermissionDenied, never),
        // 404
        "FILE_NOT_FOUND"
        | "COMMAND_NOT_FOUND"
        | "PROCESS_NOT_FOUND"
        | "PORT_NOT_EXPOSED"
        | "GIT_REPOSITORY_NOT_FOUND"
        | "GIT_BRANCH_NOT_FOUND"
        | "BACKUP_NOT_FOUND"
        | "CONTEXT_NOT_FOUND"
        | "WATCH_NOT_FOUND" => (NotFound, never),
        // 408
        "PROCESS_READY_TIMEOUT" => (Timeout(Deadline::Unknown), Retry::Unsafe),
        // 409
        "FILE_EXISTS"
        | "RESOURCE_BUSY"
        | "SESSION_ALREADY_EXISTS"
        | "PORT_ALREADY_EXPOSED"
        | "PORT_IN_USE"
        | "OPERATION_INTERRUPTED" => (Conflict, never),
        // 410: the session's shell is gone (a command exited it); the next call recreates it.
        "SESSION_DESTROYED" | "SESSION_TERMINATED" => (NotFound, never),
        // 413
        "FILE_TOO_LARGE" => (OutputLimit, never),
        // 500
        "NO_SPACE"
        | "TOO_MANY_FILES"
        | "TOO_MANY_LINKS"
        | "FILESYSTEM_ERROR"
        | "COMMAND_EXECUTION_ERROR"
        | "STREAM_START_ERROR"
        | "PROCESS_ERROR"
        | "PORT_OPERATION_ERROR"
        | "GIT_CLONE_FAILED"
        | "GIT_CHECKOUT_FAILED"
        | "GIT_OPERATION_FAILED"
        | "BUCKET_MOUNT_ERROR"
        | "BUCKET_UNMOUNT_ERROR"
        | "S3FS_MOUNT_ERROR"
        | "BACKUP_CREATE_FAILED"
        | "BACKUP_RESTORE_FAILED"
        | "CODE_EXECUTION_ERROR"
        | "PROCESS_EXITED_BEFORE_READY"
        | "WATCH_START_ERROR"
        | "WATCH_STOP_ERROR"
        | "UNKNOWN_ERROR"
        | "INTERNAL_ERROR" => (Internal, Retry::Unsafe),
        // 501
        "PYTHON_NOT_AVAILABLE" | "JAVASCRIPT_NOT_AVAILABLE" => (Unsupported, never),
        // 502
        "SERVICE_NOT_RESPONDING" | "GIT_NETWORK_ERROR" => (Unavailable, Retry::Unsafe),
        // 503: the SDK marks these retryable (the container is starting or was replaced, the RPC
        // connection is reopened on the next call).
        "INTERPRETER_NOT_READY"
        | "OPENCODE_STARTUP_FAILED"
        | "RPC_TRANSPORT_ERROR"
        | "CONTAINER_UNAVAILABLE" => (Unavailable, Retry::SAFE),
        _ => return None,
    })
}

/// A non-2xx HTTP answer of the bridge (or of what stands in front of it).
pub fn http_error(
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
    operation: &'static str,
    stage: Stage,
) -> Error {
    let parsed: Option<ErrorResponse> = serde_json::from_slice(body).ok();
    let text = match &parsed {
        Some(e) => e.error.clone(),
        None => execseam_adapter_kit::excerpt::excerpt(body, 300)
            .unwrap_or_else(|| format!("HTTP {status}")),
    };
    let code = parsed.as_ref().map(|e| e.code.as_str());
    let (kind, retry) = match (status, code) {
        // The bridge Worker emits no 429 (cf-sandbox `packages/sandbox/src`); Cloudflare's own
        // rate-limiting rule blocks at the edge, before the Worker, with its "error code: 1015"
        // page. Any other 429 may follow a forwarded exec (issue 38).
        (429, _) => retry::signed(
            429,
            stage,
            retry_after,
            parsed.is_none() && text.contains("error code: 1015"),
        ),
        (_, Some("unauthorized")) | (401, _) => (ErrorKind::Unauthenticated, Retry::Never),
        // 403 invalid_request: a cwd or file path that resolves outside /workspace.
        (403, _) => (ErrorKind::PermissionDenied, Retry::Never),
        (_, Some("invalid_request")) => (ErrorKind::InvalidCommand, Retry::Never),
        (_, Some("payload_too_large")) | (413, _) => (ErrorKind::InvalidCommand, Retry::Never),
        (_, Some("workspace_read_not_found")) => (ErrorKind::NotFound, Retry::Never),
        // Resolved before the request reached the sandbox: nothing ran.
        (_, Some("capacity_exceeded" | "pool_error")) => (ErrorKind::Unavailable, Retry::SAFE),
        (_, Some("exec_transport_error")) => (ErrorKind::Unavailable, stage.retry(Sent::Maybe)),
        (_, Some("exec_error")) => (ErrorKind::Unavailable, stage.retry(Sent::Maybe)),
        (_, Some("workspace_archive_read_error" | "workspace_archive_write_error")) => {
            (ErrorKind::Internal, stage.retry(Sent::Maybe))
        }
        (_, Some("session_error" | "tunnel_error" | "mount_error" | "unmount_error")) => {
            (ErrorKind::Internal, Retry::Never)
        }
        (_, Some(c)) if container_code(c).is_some() => {
            let (k, r) = container_code(c).expect("checked");
            (
                k,
                if stage == Stage::Before && r == Retry::Unsafe {
                    Retry::SAFE
                } else {
                    r
                },
            )
        }
        (404, _) => (ErrorKind::NotFound, Retry::Never),
        (408, _) => (
            ErrorKind::Timeout(Deadline::Request),
            stage.retry(Sent::Maybe),
        ),
        (500, _) => (
            ErrorKind::Internal,
            if stage == Stage::Before {
                Retry::Never
            } else {
                Retry::Unsafe
            },
        ),
        (502..=504 | 520..=527, _) => (ErrorKind::Unavailable, stage.retry(Sent::Maybe)),
        (400..=499, _) => (ErrorKind::InvalidCommand, Retry::Never),
        _ => (ErrorKind::Internal, stage.retry(Sent::Maybe)),
    };
    let kind = if kind == ErrorKind::Unavailable && is_container_unavailable(&text) {
        return with_code(
            err(ErrorKind::Unavailable, text, operation)
                .with_status(WireStatus::Http(status))
                .with_retry(Retry::SAFE),
            code,
        );
    } else {
        kind
    };
    with_code(
        err(kind, text, operation)
            .with_status(WireStatus::Http(status))
            .with_retry(retry),
        code,
    )
}

fn with_code(e: Error, code: Option<&str>) -> Error {
    match code {
        Some(c) => e.with_code(c),
        None => e,
    }
}

/// An SSE `error` event of the exec stream: the command was started, so the retry class is
/// `Unsafe`, except for the runtime's container-admission failures (it never started).
pub fn stream_error(e: &ErrorResponse) -> Error {
    let (kind, retry) = if is_container_unavailable(&e.error) {
        (ErrorKind::Unavailable, Retry::SAFE)
    } else if e.error.contains("Command timeout after") || e.error.contains("timed out after") {
        // Session mode: the sandbox's `timeout_ms` fired and the command was killed.
        (ErrorKind::Timeout(Deadline::Command), Retry::Unsafe)
    } else if let Some((k, r)) = container_code(&e.code) {
        (k, if r == Retry::Never { r } else { Retry::Unsafe })
    } else {
        // `exec_error` (the SDK's exec threw: the container went away, the stream broke, the
        // session shell died) and `exec_transport_error` (the SDK call itself failed).
        (ErrorKind::Unavailable, Retry::Unsafe)
    };
    err(kind, e.error.clone(), "exec")
        .with_retry(retry)
        .with_code(e.code.clone())
}

/// A call of this adapter: [`Stage::Before`] for requests that cannot run a command (create,
/// files, session); the exec request is [`Stage::Submit`] until its stream starts, then
/// [`Stage::After`].
pub(crate) const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// A protocol violation (malformed body or frame, missing exit).
pub(crate) fn protocol(message: impl Into<String>, operation: &'static str, stage: Stage) -> Error {
    call(operation, stage)
        .protocol(message)
        .with_retry(stage.retry(Sent::Maybe))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(error: &str, code: &str) -> Vec<u8> {
        serde_json::to_vec(&ErrorResponse {
            error: error.into(),
            code: code.into(),
        })
        .unwrap()
    }

    #[test]
    fn bridge_codes_before_the_stream() {
        let cases: Vec<(u16, &str, ErrorKind, Retry)> = vec![
            (
                401,
                "unauthorized",
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (
                400,
                "invalid_request",
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                403,
                "invalid_request",
                ErrorKind::PermissionDenied,
                Retry::Never,
            ),
            (
                503,
                "capacity_exceeded",
                ErrorKind::Unavailable,
                Retry::SAFE,
            ),
            (502, "pool_error", ErrorKind::Unavailable, Retry::SAFE),
            (
                502,
                "exec_transport_error",
                ErrorKind::Unavailable,
                Retry::Unsafe,
            ),
            (
                404,
                "workspace_read_not_found",
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                413,
                "payload_too_large",
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (502, "session_error", ErrorKind::Internal, Retry::Never),
        ];
        for (status, code, kind, retry) in cases {
            let e = http_error(status, None, &body("m", code), "exec", Stage::Submit);
            assert_eq!((e.kind(), e.retry()), (kind, retry), "{status} {code}");
            assert_eq!(e.code(), Some(code));
            assert_eq!(e.status(), Some(WireStatus::Http(status)));
            assert_eq!(e.provider(), "cloudflare");
        }
    }

    #[test]
    fn plain_statuses_without_a_json_body() {
        let e = http_error(
            429,
            Some(Duration::from_secs(3)),
            b"error code: 1015",
            "exec",
            Stage::Submit,
        );
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert_eq!(e.retry().after(), Some(Duration::from_secs(3)));
        assert!(e.retry().is_safe());
        // Not the edge's page (a gateway's, the chaos proxy's JSON): the exec may have run.
        for body in [&b""[..], br#"{"message":"chaos: injected 429","code":429}"#] {
            let e = http_error(
                429,
                Some(Duration::from_secs(3)),
                body,
                "exec",
                Stage::Submit,
            );
            assert_eq!(
                (e.kind(), e.retry()),
                (ErrorKind::RateLimited, Retry::Unsafe)
            );
            let e = http_error(429, None, body, "read_file", Stage::Before);
            assert!(e.retry().is_safe());
        }
        let e = http_error(500, None, b"Internal Server Error", "exec", Stage::Submit);
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Internal, Retry::Unsafe));
        let e = http_error(503, None, b"", "read_file", Stage::Before);
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE));
        let e = http_error(404, None, b"Not Found", "exec", Stage::Submit);
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = http_error(
            502,
            None,
            &body(
                "pool error: There is no container instance available at this time",
                "pool_error",
            ),
            "exec",
            Stage::Submit,
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE));
    }

    #[test]
    fn stream_errors_are_unsafe_except_admission_failures() {
        let e = stream_error(&ErrorResponse {
            error: "Network connection lost.".into(),
            code: "exec_error".into(),
        });
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        let e = stream_error(&ErrorResponse {
            error: "exec failed: There is no container instance that can be provided to this Durable Object".into(),
            code: "exec_transport_error".into(),
        });
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE));
        let e = stream_error(&ErrorResponse {
            error: "Failed to execute command 'x' in session 's': Command timeout after 500ms"
                .into(),
            code: "exec_error".into(),
        });
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command));
    }

    #[test]
    fn every_container_code_of_the_status_map_is_mapped() {
        // The 68 codes of packages/shared/src/errors/codes.ts.
        let codes = "IS_DIRECTORY NOT_DIRECTORY NAME_TOO_LONG INVALID_COMMAND INVALID_PORT_NUMBER INVALID_PORT CUSTOM_DOMAIN_REQUIRED INVALID_GIT_URL MISSING_CREDENTIALS INVALID_MOUNT_CONFIG BACKUP_EXPIRED INVALID_BACKUP_CONFIG VALIDATION_FAILED INVALID_JSON_RESPONSE GIT_AUTH_FAILED PERMISSION_DENIED READ_ONLY COMMAND_PERMISSION_DENIED PROCESS_PERMISSION_DENIED FILE_NOT_FOUND COMMAND_NOT_FOUND PROCESS_NOT_FOUND PORT_NOT_EXPOSED GIT_REPOSITORY_NOT_FOUND GIT_BRANCH_NOT_FOUND BACKUP_NOT_FOUND CONTEXT_NOT_FOUND WATCH_NOT_FOUND PROCESS_READY_TIMEOUT FILE_EXISTS RESOURCE_BUSY SESSION_ALREADY_EXISTS PORT_ALREADY_EXPOSED PORT_IN_USE OPERATION_INTERRUPTED SESSION_DESTROYED SESSION_TERMINATED FILE_TOO_LARGE NO_SPACE TOO_MANY_FILES TOO_MANY_LINKS FILESYSTEM_ERROR COMMAND_EXECUTION_ERROR STREAM_START_ERROR PROCESS_ERROR PORT_OPERATION_ERROR GIT_CLONE_FAILED GIT_CHECKOUT_FAILED GIT_OPERATION_FAILED BUCKET_MOUNT_ERROR BUCKET_UNMOUNT_ERROR S3FS_MOUNT_ERROR BACKUP_CREATE_FAILED BACKUP_RESTORE_FAILED CODE_EXECUTION_ERROR PROCESS_EXITED_BEFORE_READY WATCH_START_ERROR WATCH_STOP_ERROR UNKNOWN_ERROR INTERNAL_ERROR PYTHON_NOT_AVAILABLE JAVASCRIPT_NOT_AVAILABLE SERVICE_NOT_RESPONDING GIT_NETWORK_ERROR INTERPRETER_NOT_READY OPENCODE_STARTUP_FAILED RPC_TRANSPORT_ERROR CONTAINER_UNAVAILABLE";
        let codes: Vec<_> = codes.split_whitespace().collect();
        assert_eq!(codes.len(), 68);
        for c in codes {
            assert!(container_code(c).is_some(), "{c}");
        }
        assert_eq!(
            container_code("CONTAINER_UNAVAILABLE"),
            Some((ErrorKind::Unavailable, Retry::SAFE))
        );
        let e = http_error(
            404,
            None,
            &body("File not found: /x", "FILE_NOT_FOUND"),
            "read_file",
            Stage::Before,
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
