//! gRPC statuses and Modal's error details → [`ErrorKind`] + [`Retry`], on the adapter kit's
//! `retry` and `grpc` helpers.
//!
//! Three things decide the mapping:
//!
//! - **Where the status came from** ([`Origin`]): Modal's word (then
//!   [`retry::grpc_status`] gives the kind and class), a connection that never opened
//!   ([`NoAnswer::Connect`]: nothing was sent), our own request timer ([`NoAnswer::Timeout`]), a
//!   transport failure after the request may have been sent ([`NoAnswer::Cut`]), or a status tonic
//!   made up while decoding: a malformed message or a stream without its trailers
//!   ([`NoAnswer::Malformed`]).
//! - **Modal's details**: `grpc-status-details-bin` carries an `RPCStatus` whose `details` are
//!   `Any`s; an `RPCRetryPolicy{retry_after_secs}` among them is the server's delay before a
//!   retry (the client honours it for any status, `modal/_utils/grpc_utils.py`
//!   `get_server_retry_policy`; at least 0.1 s, as there). It becomes the `after` of a
//!   `RESOURCE_EXHAUSTED` (otherwise `Retry::Safe` without a delay).
//! - **The stage** (the kit's [`Stage`]): `TaskExecStart` and the creating calls are
//!   [`Stage::Submit`]; lookups, access, list and terminate are [`Stage::Before`]; after
//!   `TaskExecStart` answered every failure is [`Retry::Unsafe`] (the command ran, or runs).
//!
//! | status | kind | retry (exec start) |
//! |---|---|---|
//! | `UNAUTHENTICATED` | Unauthenticated | never |
//! | `PERMISSION_DENIED` | PermissionDenied | never |
//! | `NOT_FOUND` | NotFound | never |
//! | `INVALID_ARGUMENT`, `OUT_OF_RANGE` | InvalidCommand | never |
//! | `ALREADY_EXISTS`, `FAILED_PRECONDITION` | Conflict | never |
//! | `ABORTED` | Conflict | unsafe |
//! | `RESOURCE_EXHAUSTED` | RateLimited | safe, after the `RPCRetryPolicy` delay |
//! | `UNAVAILABLE` | Unavailable | unsafe (the router may have taken it; the official client repeats it with the same `exec_id`, see `ModalConfig::exec_start_retries`) |
//! | `DEADLINE_EXCEEDED` | Timeout(Unknown) | unsafe |
//! | `INTERNAL`, `UNKNOWN` | Internal | unsafe |
//! | `CANCELLED` | Cancelled | unsafe |
//! | `DATA_LOSS` | Protocol | unsafe |
//! | `UNIMPLEMENTED` | Unsupported | never |
//! | connection refused / unreachable | Unavailable | safe |
//! | our request timer | Timeout(Request) | unsafe |
//! | reset, broken HTTP/2 stream | Unavailable | unsafe |
//! | malformed message, missing trailers | Protocol | unsafe |

pub use execseam_adapter_kit::grpc::Origin;
use execseam_adapter_kit::grpc::{self, code_name};
use execseam_adapter_kit::retry::{self, NoAnswer, Stage};
use execseam_adapter_kit::text;
use std::time::Duration;

use execseam_core::{Error, ErrorKind, Retry, WireStatus};
use prost::Message as _;
use tonic::{Code, Status};

use crate::PROVIDER;
use crate::wire::api::{RpcRetryPolicy, RpcStatus};

/// The message of the status our own timer makes (see `client::timed`).
pub(crate) const TIMER_MESSAGE: &str = "execseam: no answer within";

/// Where a [`Status`] came from ([`grpc::origin`], with our timer's message).
pub fn origin(status: &Status) -> Origin {
    grpc::origin(status, Some(TIMER_MESSAGE))
}

/// The delay Modal asked for: an `RPCRetryPolicy` in the status details.
pub fn requested_delay(status: &Status) -> Option<Duration> {
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
pub fn from_status(status: Status, op: &'static str, stage: Stage) -> Error {
    let origin = origin(&status);
    let code = status.code();
    let (kind, retry) = classify(&status, origin, stage);
    let message = match origin {
        Origin::Peer | Origin::Timer if status.message().is_empty() => {
            code.description().to_owned()
        }
        Origin::Peer | Origin::Timer => status.message().to_owned(),
        Origin::Connect => format!("cannot connect to Modal: {}", text::error_chain(&status)),
        Origin::Transport => format!("transport failure: {}", text::error_chain(&status)),
        Origin::Decode => format!("malformed answer: {}", status.message()),
    };
    let mut err = Error::new(kind, message)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(op)
        .with_status(WireStatus::Grpc(code as i32))
        .with_code(code_name(code));
    if !matches!(origin, Origin::Peer | Origin::Timer) {
        err = err.with_source(status);
    }
    err
}

/// The kind and retry class for a status.
pub fn classify(status: &Status, origin: Origin, stage: Stage) -> (ErrorKind, Retry) {
    let effect = stage;
    let (kind, retry) = match origin {
        Origin::Connect => retry::no_answer(NoAnswer::Connect, effect),
        Origin::Timer => retry::no_answer(NoAnswer::Timeout, effect),
        Origin::Transport => retry::no_answer(NoAnswer::Cut, effect),
        Origin::Decode => retry::no_answer(NoAnswer::Malformed, effect),
        Origin::Peer => match status.code() {
            Code::Ok => (ErrorKind::Protocol, Retry::Never),
            Code::ResourceExhausted => (
                ErrorKind::RateLimited,
                Retry::Safe {
                    after: requested_delay(status),
                },
            ),
            code => retry::grpc_status(code as i32, effect),
        },
    };
    // After the start answered every failure may follow a run, a rejection too.
    match stage {
        Stage::After => (kind, Retry::Unsafe),
        _ => (kind, retry),
    }
}

/// True for statuses the official client repeats (`RETRYABLE_GRPC_STATUS_CODES`:
/// DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN), transport failures, and any
/// status carrying a retry policy; for calls that are safe to repeat.
pub fn transient(status: &Status) -> bool {
    match origin(status) {
        Origin::Connect | Origin::Transport | Origin::Timer => true,
        Origin::Decode => false,
        Origin::Peer => {
            requested_delay(status).is_some()
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
        Origin::Connect | Origin::Transport | Origin::Timer => true,
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

/// A protocol error of operation `op`.
pub fn protocol(op: &'static str, message: impl Into<String>) -> Error {
    Error::protocol(message)
        .with_provider(PROVIDER)
        .with_operation(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_modal_proto::google::protobuf::Any;

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
        assert_eq!(requested_delay(&s), Some(Duration::from_millis(2500)));
        let (kind, retry) = classify(&s, Origin::Peer, Stage::Submit);
        assert_eq!(kind, ErrorKind::RateLimited);
        assert_eq!(
            retry,
            Retry::Safe {
                after: Some(Duration::from_millis(2500))
            }
        );
        // At least 0.1 s, as the client.
        assert_eq!(
            requested_delay(&with_policy(Code::Unavailable, 0.0)),
            Some(Duration::from_millis(100))
        );
        assert!(transient(&with_policy(Code::ResourceExhausted, 1.0)));
        assert!(!transient(&Status::resource_exhausted("no policy")));
        assert_eq!(requested_delay(&Status::unavailable("x")), None);
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
            (Code::Unavailable, ErrorKind::Unavailable, Retry::Unsafe),
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
                classify(&peer(code), Origin::Peer, Stage::Submit),
                (kind, retry),
                "{code:?}"
            );
            assert_eq!(
                classify(&peer(code), Origin::Peer, Stage::After).1,
                Retry::Unsafe
            );
        }
        let cut = Status::internal("protocol error: missing grpc-status trailer");
        assert_eq!(origin(&cut), Origin::Decode);
        assert!(resumable(&cut));
        assert_eq!(
            classify(&cut, Origin::Decode, Stage::Submit),
            (ErrorKind::Protocol, Retry::Unsafe)
        );
        let timer = Status::deadline_exceeded(format!("{TIMER_MESSAGE} 1s"));
        assert_eq!(origin(&timer), Origin::Timer);
        assert_eq!(
            classify(&timer, Origin::Timer, Stage::Before).0,
            ErrorKind::Timeout(execseam_core::Deadline::Request)
        );
        let bad = Status::internal("failed to decode Protobuf message: x");
        assert!(!resumable(&bad));
    }
}
