//! gRPC statuses and Modal's error details → [`ErrorKind`] + [`Retry`].
//!
//! Three things decide the mapping:
//!
//! - **Where the status came from** ([`Origin`]): Modal's word, a connection that never opened
//!   (nothing was sent), a transport failure after the request may have been sent, or a status
//!   tonic made up while decoding (a malformed message, a stream without its trailers).
//! - **Modal's details**: `grpc-status-details-bin` carries an `RPCStatus` whose `details` are
//!   `Any`s; an `RPCRetryPolicy{retry_after_secs}` among them is the server asking to be called
//!   again after that long (the client honours it for any status, `modal/_utils/grpc_utils.py`
//!   `get_server_retry_policy`; at least 0.1 s, as there).
//! - **The phase** ([`Phase`]): before `TaskExecStart` answered the command may not exist;
//!   after it, every failure is [`Retry::Unsafe`].
//!
//! | status | kind | retry (start phase) |
//! |---|---|---|
//! | `UNAUTHENTICATED` | Unauthenticated | never |
//! | `PERMISSION_DENIED` | PermissionDenied | never |
//! | `NOT_FOUND` | NotFound | never |
//! | `INVALID_ARGUMENT`, `OUT_OF_RANGE` | InvalidCommand | never |
//! | `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `ABORTED` | Conflict | never |
//! | `RESOURCE_EXHAUSTED` | RateLimited | safe, after the `RPCRetryPolicy` delay |
//! | `UNAVAILABLE` | Unavailable | safe (after the delay, if any) |
//! | `DEADLINE_EXCEEDED` | Timeout(Request) | unsafe |
//! | `INTERNAL`, `UNKNOWN`, `DATA_LOSS` | Internal | unsafe |
//! | `CANCELLED` | Cancelled | unsafe |
//! | `UNIMPLEMENTED` | Unsupported | never |
//! | connection refused / unreachable | Unavailable | safe |
//! | reset, broken HTTP/2 stream | Unavailable | unsafe |
//! | malformed message, missing trailers | Protocol | unsafe |

use std::error::Error as StdError;
use std::time::Duration;

use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};
use prost::Message as _;
use tonic::{Code, Status};

use crate::wire::api::{RpcRetryPolicy, RpcStatus};

/// The provider name in errors.
pub const PROVIDER: &str = "modal";

/// Where a [`Status`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The connection could not be opened: the request never left.
    Connect,
    /// The transport failed after the request may have been sent.
    Transport,
    /// tonic rejected what came back.
    Decode,
    /// Modal sent this status.
    Peer,
}

const DECODE_PREFIXES: &[&str] = &[
    "failed to decode Protobuf message",
    "protocol error:",
    "Unexpected EOF decoding stream",
    "Error, decoded message length too large",
    "Error decompressing",
];

/// Classifies a status by its origin.
pub fn origin(status: &Status) -> Origin {
    let mut source: Option<&(dyn StdError + 'static)> = status.source();
    if source.is_some() {
        while let Some(e) = source {
            if e.downcast_ref::<tonic::ConnectError>().is_some() {
                return Origin::Connect;
            }
            source = e.source();
        }
        return Origin::Transport;
    }
    if DECODE_PREFIXES
        .iter()
        .any(|p| status.message().starts_with(p))
    {
        return Origin::Decode;
    }
    Origin::Peer
}

/// Which step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `TaskExecStart`: the command may not exist yet.
    Start,
    /// After `TaskExecStart` answered: the command ran, or runs.
    Started,
    /// A control-plane call that creates something (repeated only with its idempotency key).
    Create,
    /// A call that runs nothing (lookup, access, list, terminate).
    Other,
}

/// The delay Modal asked for: an `RPCRetryPolicy` in the status details.
pub fn retry_after(status: &Status) -> Option<Duration> {
    let details = RpcStatus::decode(status.details()).ok()?;
    details
        .details
        .iter()
        .filter(|a| a.type_url.rsplit('/').next() == Some("modal.client.RPCRetryPolicy"))
        .find_map(|a| RpcRetryPolicy::decode(a.value.as_ref()).ok())
        // f32 seconds to whole milliseconds (0.1f32 is not 100 ms exactly).
        .map(|p| {
            Duration::from_millis((f64::from(p.retry_after_secs.max(0.1)) * 1000.0).round() as u64)
        })
}

/// Maps a status from operation `op` in `phase`.
pub fn from_status(status: Status, op: &'static str, phase: Phase) -> Error {
    let origin = origin(&status);
    let code = status.code();
    let (kind, retry) = classify(&status, origin, phase);
    let message = if status.message().is_empty() {
        code.description().to_owned()
    } else {
        status.message().to_owned()
    };
    let message = match origin {
        Origin::Connect => format!("cannot connect to Modal: {message}"),
        Origin::Transport => format!("transport failure: {message}"),
        Origin::Decode => format!("malformed answer: {message}"),
        Origin::Peer => message,
    };
    let mut err = Error::new(kind, message)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(op)
        .with_status(WireStatus::Grpc(code as i32))
        .with_code(code_name(code));
    if origin != Origin::Peer {
        err = err.with_source(status);
    }
    err
}

/// The kind and retry class for a status.
pub fn classify(status: &Status, origin: Origin, phase: Phase) -> (ErrorKind, Retry) {
    let unsafe_or = |before: Retry| match phase {
        Phase::Started => Retry::Unsafe,
        Phase::Start | Phase::Create | Phase::Other => before,
    };
    match origin {
        Origin::Connect => return (ErrorKind::Unavailable, unsafe_or(Retry::SAFE)),
        Origin::Transport => {
            let kind = if status.code() == Code::Cancelled
                && status.message().contains("Timeout expired")
            {
                ErrorKind::Timeout(Deadline::Request)
            } else {
                ErrorKind::Unavailable
            };
            let retry = match phase {
                Phase::Other => Retry::SAFE,
                _ => Retry::Unsafe,
            };
            return (kind, retry);
        }
        Origin::Decode => {
            let retry = match phase {
                Phase::Other => Retry::Never,
                _ => Retry::Unsafe,
            };
            return (ErrorKind::Protocol, retry);
        }
        Origin::Peer => {}
    }
    let after = retry_after(status);
    match status.code() {
        Code::Ok => (ErrorKind::Protocol, unsafe_or(Retry::Never)),
        Code::Cancelled => (ErrorKind::Cancelled, unsafe_or(Retry::Unsafe)),
        Code::Unknown | Code::Internal | Code::DataLoss => {
            (ErrorKind::Internal, unsafe_or(Retry::Unsafe))
        }
        Code::InvalidArgument | Code::OutOfRange => {
            (ErrorKind::InvalidCommand, unsafe_or(Retry::Never))
        }
        Code::DeadlineExceeded => (
            ErrorKind::Timeout(Deadline::Request),
            unsafe_or(Retry::Unsafe),
        ),
        Code::NotFound => (ErrorKind::NotFound, unsafe_or(Retry::Never)),
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => {
            (ErrorKind::Conflict, unsafe_or(Retry::Never))
        }
        Code::PermissionDenied => (ErrorKind::PermissionDenied, unsafe_or(Retry::Never)),
        Code::Unauthenticated => (ErrorKind::Unauthenticated, unsafe_or(Retry::Never)),
        Code::ResourceExhausted => (ErrorKind::RateLimited, unsafe_or(Retry::Safe { after })),
        Code::Unavailable => (ErrorKind::Unavailable, unsafe_or(Retry::Safe { after })),
        Code::Unimplemented => (ErrorKind::Unsupported, unsafe_or(Retry::Never)),
    }
}

/// True for statuses the official client retries (`RETRYABLE_GRPC_STATUS_CODES`:
/// DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN), transport failures, and any
/// status carrying a retry policy; for calls that are safe to repeat.
pub fn transient(status: &Status) -> bool {
    match origin(status) {
        Origin::Connect | Origin::Transport => true,
        Origin::Decode => false,
        Origin::Peer => {
            retry_after(status).is_some()
                || matches!(
                    status.code(),
                    Code::DeadlineExceeded
                        | Code::Unavailable
                        | Code::Cancelled
                        | Code::Internal
                        | Code::Unknown
                )
        }
    }
}

/// True for failures of an output stream that reopening it at the bytes received may heal: a
/// transport failure, a stream cut before its status, or a status the client retries.
pub fn resumable(status: &Status) -> bool {
    match origin(status) {
        Origin::Connect | Origin::Transport => true,
        Origin::Decode => {
            status
                .message()
                .starts_with("protocol error: missing grpc-status trailer")
                || status
                    .message()
                    .starts_with("Unexpected EOF decoding stream")
        }
        Origin::Peer => matches!(
            status.code(),
            Code::Unavailable | Code::Cancelled | Code::Internal | Code::Unknown
        ),
    }
}

/// The canonical upper-case name of a code, used as the error's provider code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A protocol error of operation `op`.
pub fn protocol(op: &'static str, message: impl Into<String>) -> Error {
    Error::protocol(message)
        .with_provider(PROVIDER)
        .with_operation(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::google::protobuf::Any;

    fn with_policy(code: Code, secs: f32) -> Status {
        let detail = RpcRetryPolicy {
            retry_after_secs: secs,
        };
        let details = RpcStatus {
            code: code as i32,
            message: "slow down".into(),
            details: vec![Any {
                type_url: "type.modal.com/modal.client.RPCRetryPolicy".into(),
                value: detail.encode_to_vec().into(),
            }],
        };
        Status::with_details(code, "slow down", details.encode_to_vec().into())
    }

    #[test]
    fn modal_retry_policy_details_give_the_delay() {
        let s = with_policy(Code::ResourceExhausted, 2.5);
        assert_eq!(retry_after(&s), Some(Duration::from_millis(2500)));
        let (kind, retry) = classify(&s, Origin::Peer, Phase::Start);
        assert_eq!(kind, ErrorKind::RateLimited);
        assert_eq!(
            retry,
            Retry::Safe {
                after: Some(Duration::from_millis(2500))
            }
        );
        // At least 0.1 s, as the client.
        assert_eq!(
            retry_after(&with_policy(Code::Unavailable, 0.0)),
            Some(Duration::from_millis(100))
        );
        assert!(transient(&with_policy(Code::ResourceExhausted, 1.0)));
        assert!(!transient(&Status::resource_exhausted("no policy")));
        assert_eq!(retry_after(&Status::unavailable("x")), None);
    }

    #[test]
    fn mapping_by_phase() {
        let peer = |c: Code| Status::new(c, "m");
        let cases = [
            (
                Code::Unauthenticated,
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (Code::NotFound, ErrorKind::NotFound, Retry::Never),
            (Code::Unavailable, ErrorKind::Unavailable, Retry::SAFE),
            (Code::Internal, ErrorKind::Internal, Retry::Unsafe),
            (Code::FailedPrecondition, ErrorKind::Conflict, Retry::Never),
            (Code::Unimplemented, ErrorKind::Unsupported, Retry::Never),
            (
                Code::InvalidArgument,
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
        ];
        for (code, kind, retry) in cases {
            assert_eq!(
                classify(&peer(code), Origin::Peer, Phase::Start),
                (kind, retry),
                "{code:?}"
            );
            assert_eq!(
                classify(&peer(code), Origin::Peer, Phase::Started).1,
                Retry::Unsafe
            );
        }
        let cut = Status::internal("protocol error: missing grpc-status trailer");
        assert_eq!(origin(&cut), Origin::Decode);
        assert!(resumable(&cut));
        assert_eq!(
            classify(&cut, Origin::Decode, Phase::Start),
            (ErrorKind::Protocol, Retry::Unsafe)
        );
        let bad = Status::internal("failed to decode Protobuf message: x");
        assert!(!resumable(&bad));
    }
}
