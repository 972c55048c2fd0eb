//! AgentCore errors → [`ErrorKind`] + [`Retry`].
//!
//! Two channels carry infrastructure failures: the HTTP status of the call (modelled exceptions
//! named by `x-amzn-errortype`, plus the AWS front door's own errors), and exception events inside
//! the 200 event stream. A generic `:message-type = error` frame, a bad frame, or a stream that
//! ends without a result is a [`ErrorKind::Protocol`] error.
//!
//! The retry class depends on whether the call submits a command (`executeCommand`,
//! `startCommandExecution`): for those, anything that may have reached the sandbox is
//! [`Retry::Unsafe`]; only an HTTP rejection (a 4xx with a modelled code, a 429/402) or a
//! connection that was never made is [`Retry::Safe`].

use execseam_adapter_kit::retry::{Call, Stage};
use std::error::Error as StdError;
use std::time::Duration;

use aws_sdk_bedrockagentcore::config::http::HttpResponse;
use aws_sdk_bedrockagentcore::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockagentcore::types::error::CodeInterpreterStreamOutputError;
use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;

/// A call of this adapter: it names the error's operation, and its stage decides whether a
/// retry is safe (only the command's submit may have run anything).
const fn call(operation: &'static str, stage: Stage) -> Call {
    Call::new(PROVIDER, operation, stage)
}

/// StartCodeInterpreterSession: once sent, the session may exist (issue 38, D17: it was
/// `Stage::Before`, so a cut after the send was `Retry::Safe`, never swept, and a retry (with
/// a new `clientToken`) started a second session).
pub(crate) const START_SESSION: Call = call("start_session", Stage::Submit);
/// StopCodeInterpreterSession.
pub(crate) const STOP_SESSION: Call = call("stop_session", Stage::Before);
/// GetCodeInterpreterSession.
pub(crate) const GET_SESSION: Call = call("get_session", Stage::Before);
/// ListCodeInterpreterSessions.
pub(crate) const LIST_SESSIONS: Call = call("list_sessions", Stage::Before);
/// InvokeCodeInterpreter that starts a command (`executeCommand`, `startCommandExecution`): never re-sent, and unsafe to retry once sent.
pub(crate) const SUBMIT: Call = call("exec", Stage::Submit);
/// `getTask`.
pub(crate) const POLL: Call = call("get_task", Stage::Before);
/// `stopTask`.
pub(crate) const STOP_TASK: Call = call("stop_task", Stage::Before);
/// `writeFiles` (the stdin upload or the files API).
pub(crate) const WRITE_FILES: Call = call("write_files", Stage::Before);
/// `readFiles`.
pub(crate) const READ_FILES: Call = call("read_files", Stage::Before);
/// `listFiles`.
pub(crate) const LIST_FILES: Call = call("list_files", Stage::Before);
/// `removeFiles`.
pub(crate) const REMOVE_FILES: Call = call("remove_files", Stage::Before);

/// Where an error was reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Channel {
    /// The HTTP status of the call with one of the service's modelled errors (its
    /// `x-amzn-errortype`, or `__type`/`code` of the body): the service rejected the request
    /// as a whole.
    Http,
    /// An HTTP status without a modelled error: whoever answered (a gateway, a proxy) may
    /// have forwarded the request first (issue 38).
    BareStatus,
    /// An exception event inside the 200 stream: the request was accepted.
    Stream,
}

/// The kind for an AgentCore (or AWS front-door) error code, falling back on the HTTP status.
pub(crate) fn kind_for(code: Option<&str>, status: Option<u16>) -> ErrorKind {
    let by_code = code.map(|c| match c {
        "ValidationException" | "validationException" | "SerializationException" => {
            Some(ErrorKind::InvalidCommand)
        }
        "ServiceQuotaExceededException" | "serviceQuotaExceededException" => {
            Some(ErrorKind::RateLimited)
        }
        "ThrottlingException" | "throttlingException" | "TooManyRequestsException" => {
            Some(ErrorKind::RateLimited)
        }
        "AccessDeniedException" | "accessDeniedException" => Some(ErrorKind::PermissionDenied),
        "ResourceNotFoundException" | "resourceNotFoundException" => Some(ErrorKind::NotFound),
        "ConflictException" | "conflictException" => Some(ErrorKind::Conflict),
        "InternalServerException" | "internalServerException" | "InternalFailure" => {
            Some(ErrorKind::Internal)
        }
        "ServiceUnavailableException" | "ServiceUnavailable" => Some(ErrorKind::Unavailable),
        // The AWS front door's answers to missing, unknown, expired or mis-signed credentials.
        "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException"
        | "MissingAuthenticationToken"
        | "InvalidClientTokenId"
        | "ExpiredTokenException"
        | "ExpiredToken"
        | "SignatureDoesNotMatch" => Some(ErrorKind::Unauthenticated),
        _ => None,
    });
    if let Some(Some(kind)) = by_code {
        return kind;
    }
    match status {
        Some(401) => ErrorKind::Unauthenticated,
        Some(403) => ErrorKind::PermissionDenied,
        Some(404) => ErrorKind::NotFound,
        Some(409) => ErrorKind::Conflict,
        Some(402 | 429) => ErrorKind::RateLimited,
        Some(400 | 413 | 422) => ErrorKind::InvalidCommand,
        Some(502..=504) => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    }
}

/// The retry class of an error of `kind` reported on `channel` for `op`.
pub(crate) fn retry_for(
    kind: ErrorKind,
    op: Call,
    channel: Channel,
    retry_after: Option<Duration>,
) -> Retry {
    let may_have_run = op.stage == Stage::Submit;
    match kind {
        ErrorKind::InvalidCommand
        | ErrorKind::Unauthenticated
        | ErrorKind::PermissionDenied
        | ErrorKind::NotFound => Retry::Never,
        // A rejection of the whole request by its HTTP status: nothing ran.
        ErrorKind::RateLimited | ErrorKind::Conflict if channel == Channel::Http => {
            Retry::Safe { after: retry_after }
        }
        _ if may_have_run => Retry::Unsafe,
        _ => Retry::Safe { after: retry_after },
    }
}

fn base(kind: ErrorKind, op: Call, message: impl Into<String>) -> Error {
    op.error(kind, message)
}

/// A protocol error: malformed, truncated, or missing what the result must carry.
pub(crate) fn protocol(op: Call, message: impl Into<String>) -> Error {
    base(ErrorKind::Protocol, op, message).with_retry(unsafe_once_submitted(op, Retry::SAFE))
}

/// `Unsafe` for a call at its submit (the command may have run), `otherwise` before it.
fn unsafe_once_submitted(op: Call, otherwise: Retry) -> Retry {
    if op.stage == Stage::Submit {
        Retry::Unsafe
    } else {
        otherwise
    }
}

/// No answer head or no next event within the idle timeout.
pub(crate) fn idle(op: Call, idle: Duration) -> Error {
    base(
        ErrorKind::Timeout(Deadline::Request),
        op,
        format!(
            "nothing from the event stream for {}ms (AgentCoreConfig::idle_timeout)",
            idle.as_millis()
        ),
    )
    .with_retry(unsafe_once_submitted(op, Retry::SAFE))
}

/// The result grew beyond what an invocation may carry.
pub(crate) fn output_limit(op: Call, limit: usize) -> Error {
    base(
        ErrorKind::OutputLimit,
        op,
        format!("the tool's result exceeds {limit} bytes"),
    )
    .with_retry(unsafe_once_submitted(op, Retry::Never))
}

/// A tool-level failure (`isError: true` without a usable result).
pub(crate) fn tool_error(op: Call, kind: ErrorKind, message: impl Into<String>) -> Error {
    let retry = retry_for(kind, op, Channel::Stream, None);
    base(kind, op, message).with_retry(retry)
}

fn retry_after_of(raw: &HttpResponse) -> Option<Duration> {
    let v = raw.headers().get("retry-after")?;
    execseam_adapter_kit::retry::parse_retry_after(v, std::time::SystemTime::now())
}

/// True if the error chain says the connection was never made (nothing was sent).
fn never_connected(err: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        cur = e.source();
    }
    false
}

fn chain(err: &(dyn StdError + 'static)) -> String {
    execseam_adapter_kit::text::error_chain(err)
}

/// The parts of an [`SdkError`] that do not depend on its response type.
fn transport<E, R>(op: Call, err: &SdkError<E, R>) -> Option<Error>
where
    E: StdError + 'static,
    R: std::fmt::Debug + 'static,
{
    let unsafe_or_safe = unsafe_once_submitted(op, Retry::SAFE);
    match err {
        SdkError::ConstructionFailure(_) => Some(
            base(
                ErrorKind::Internal,
                op,
                format!("the request could not be built: {}", chain(err)),
            )
            .with_retry(Retry::Never),
        ),
        SdkError::TimeoutError(_) => Some(
            base(
                ErrorKind::Timeout(Deadline::Request),
                op,
                format!("the request timed out: {}", chain(err)),
            )
            .with_retry(unsafe_or_safe),
        ),
        // The frame check refused the stream (see frames.rs): a malformed answer.
        _ if crate::frames::is_frame_error(err) => Some(protocol(
            op,
            format!("a malformed event stream: {}", chain(err)),
        )),
        SdkError::DispatchFailure(d) => {
            let (kind, retry) = if d.is_timeout() {
                (ErrorKind::Timeout(Deadline::Request), unsafe_or_safe)
            } else if never_connected(err) {
                (ErrorKind::Unavailable, Retry::SAFE)
            } else if d.is_user() {
                (ErrorKind::Internal, Retry::Never)
            } else {
                (ErrorKind::Unavailable, unsafe_or_safe)
            };
            Some(base(kind, op, format!("transport failure: {}", chain(err))).with_retry(retry))
        }
        SdkError::ResponseError(_) => {
            Some(protocol(op, format!("malformed response: {}", chain(err))))
        }
        _ => None,
    }
}

/// Maps an error of an SDK operation (`send()`), with its HTTP response.
pub(crate) fn from_operation<E>(op: Call, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    if let Some(e) = transport(op, &err) {
        return e;
    }
    let SdkError::ServiceError(ctx) = &err else {
        return protocol(op, format!("unexpected SDK error: {}", chain(&err)));
    };
    let raw = ctx.raw();
    let status = raw.status().as_u16();
    let service = ctx.err();
    let code = service.code().map(str::to_owned);
    let message = service.message().unwrap_or("(no message)").to_owned();
    let kind = kind_for(code.as_deref(), Some(status));
    // The SDK's generic error for an unmodelled answer has no code; the throttling and quota
    // exceptions are modelled ("the request was denied due to request throttling").
    let channel = if code
        .as_deref()
        .is_some_and(|c| kind_for(Some(c), None) == kind)
    {
        Channel::Http
    } else {
        Channel::BareStatus
    };
    let retry = retry_for(kind, op, channel, retry_after_of(raw));
    let mut e = base(kind, op, message)
        .with_status(WireStatus::Http(status))
        .with_retry(retry);
    if let Some(code) = code {
        e = e.with_code(code);
    }
    e.with_source(err)
}

/// The modelled member an exception event is, by its variant (the SDK does not copy the
/// `:exception-type` header into the error's `code()`).
fn stream_member(e: &CodeInterpreterStreamOutputError) -> Option<&'static str> {
    type E = CodeInterpreterStreamOutputError;
    type Is = fn(&E) -> bool;
    let members: [(Is, &str); 7] = [
        (E::is_validation_exception, "validationException"),
        (
            E::is_service_quota_exceeded_exception,
            "serviceQuotaExceededException",
        ),
        (E::is_throttling_exception, "throttlingException"),
        (E::is_access_denied_exception, "accessDeniedException"),
        (
            E::is_resource_not_found_exception,
            "resourceNotFoundException",
        ),
        (E::is_conflict_exception, "conflictException"),
        (E::is_internal_server_exception, "internalServerException"),
    ];
    members.iter().find(|(is, _)| is(e)).map(|(_, name)| *name)
}

/// Maps an error of the event stream (`recv()`): an exception event, or a bad frame.
pub(crate) fn from_stream<R>(op: Call, err: SdkError<CodeInterpreterStreamOutputError, R>) -> Error
where
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if let Some(e) = transport(op, &err) {
        return e;
    }
    let SdkError::ServiceError(ctx) = &err else {
        return protocol(op, format!("unexpected stream error: {}", chain(&err)));
    };
    let service = ctx.err();
    let message = service.message().unwrap_or("(no message)").to_owned();
    let Some(code) = stream_member(service) else {
        // An exception event of a type this SDK does not model.
        return protocol(
            op,
            format!(
                "an unrecognised exception event in the stream ({}): {message}",
                service.code().unwrap_or("no code")
            ),
        );
    };
    let kind = kind_for(Some(code), None);
    let retry = retry_for(kind, op, Channel::Stream, None);
    base(kind, op, message)
        .with_code(code)
        .with_retry(retry)
        .with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_modelled_exception_has_its_kind() {
        let table = [
            ("ValidationException", 400, ErrorKind::InvalidCommand),
            ("ServiceQuotaExceededException", 402, ErrorKind::RateLimited),
            ("AccessDeniedException", 403, ErrorKind::PermissionDenied),
            ("ResourceNotFoundException", 404, ErrorKind::NotFound),
            ("ConflictException", 409, ErrorKind::Conflict),
            ("ThrottlingException", 429, ErrorKind::RateLimited),
            ("InternalServerException", 500, ErrorKind::Internal),
            (
                "UnrecognizedClientException",
                403,
                ErrorKind::Unauthenticated,
            ),
            ("InvalidSignatureException", 403, ErrorKind::Unauthenticated),
            ("ServiceUnavailableException", 503, ErrorKind::Unavailable),
        ];
        for (code, status, kind) in table {
            assert_eq!(kind_for(Some(code), Some(status)), kind, "{code}");
        }
        // The in-stream member names map the same way.
        assert_eq!(
            kind_for(Some("throttlingException"), None),
            ErrorKind::RateLimited
        );
        // Unknown codes fall back on the status.
        assert_eq!(
            kind_for(Some("Whatever"), Some(503)),
            ErrorKind::Unavailable
        );
        assert_eq!(kind_for(None, Some(500)), ErrorKind::Internal);
        assert_eq!(kind_for(None, Some(403)), ErrorKind::PermissionDenied);
    }

    #[test]
    fn retry_classes_never_resubmit_what_may_have_run() {
        let after = Some(Duration::from_secs(2));
        // The service's modelled rejections of a submit: safe.
        assert_eq!(
            retry_for(ErrorKind::RateLimited, SUBMIT, Channel::Http, after),
            Retry::Safe { after }
        );
        // A bare 429 (no modelled error: a gateway's) may follow a forwarded submit.
        assert_eq!(
            retry_for(ErrorKind::RateLimited, SUBMIT, Channel::BareStatus, after),
            Retry::Unsafe
        );
        assert_eq!(
            retry_for(
                ErrorKind::RateLimited,
                READ_FILES,
                Channel::BareStatus,
                after
            ),
            Retry::Safe { after }
        );
        // A 500 on a submit: it may have run.
        assert_eq!(
            retry_for(ErrorKind::Internal, SUBMIT, Channel::Http, None),
            Retry::Unsafe
        );
        // In-stream throttling of a submit: the request was accepted, so it may have run.
        assert_eq!(
            retry_for(ErrorKind::RateLimited, SUBMIT, Channel::Stream, None),
            Retry::Unsafe
        );
        // A 500 on a read: safe.
        assert_eq!(
            retry_for(ErrorKind::Internal, READ_FILES, Channel::Http, None),
            Retry::SAFE
        );
        for k in [
            ErrorKind::NotFound,
            ErrorKind::Unauthenticated,
            ErrorKind::PermissionDenied,
            ErrorKind::InvalidCommand,
        ] {
            assert_eq!(
                retry_for(k, SUBMIT, Channel::Http, None),
                Retry::Never,
                "{k:?}"
            );
        }
        assert_eq!(protocol(SUBMIT, "x").retry(), Retry::Unsafe);
        assert_eq!(protocol(READ_FILES, "x").retry(), Retry::SAFE);
    }
}
