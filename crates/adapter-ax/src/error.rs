//! gRPC statuses → [`ErrorKind`] + [`Retry`].
//!
//! Two things decide the mapping: the status code, and *where the status came from* (see
//! [`Origin`]): a status the guest (or the Substrate router) sent is its word; a connection that
//! could not be opened proves nothing was sent; a transport failure after the request went out
//! (a reset, a broken HTTP/2 stream) says nothing about whether the guest acted on it; a status
//! tonic made up while decoding (a malformed message, a stream without its trailers) is a
//! protocol violation.
//!
//! And the phase: an error from `StartProcess` may be retried safely only when the guest cannot
//! have started the process; after the process started every error is [`Retry::Unsafe`].

use std::time::Duration;

pub use execseam_adapter_kit::grpc::Origin;
use execseam_adapter_kit::grpc::{self, code_name};
use execseam_adapter_kit::retry::Stage;
use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};
use tonic::{Code, Status};

/// The provider name in errors.
pub use crate::PROVIDER;

/// Where a [`Status`] came from ([`grpc::origin`]; the guest has no timer of ours).
pub fn origin(status: &Status) -> Origin {
    grpc::origin(status, None)
}

/// The retry delay a status asks for: `grpc-retry-pushback-ms` (gRFC A6) in its metadata, or a
/// `google.rpc.RetryInfo` in its details.
pub fn requested_delay(status: &Status) -> Option<Duration> {
    grpc::pushback(status).or_else(|| rpc_status::retry_delay(status.details()))
}

/// Maps a status from operation `op` in `phase` to an [`Error`].
pub fn from_status(status: Status, op: &'static str, stage: Stage) -> Error {
    let origin = origin(&status);
    let code = status.code();
    let message = status.message().to_owned();
    let (kind, retry) = classify(&status, origin, stage);
    let mut err = Error::new(kind, describe(origin, &message, code))
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

fn describe(origin: Origin, message: &str, code: Code) -> String {
    // Transport messages can name the endpoint's URL: never keep it.
    let message = execseam_adapter_kit::text::strip_urls(if message.is_empty() {
        code.description()
    } else {
        message
    });
    let message = message.as_str();
    match origin {
        Origin::Connect => format!("cannot connect to the guest: {message}"),
        Origin::Transport | Origin::Timer => format!("transport failure: {message}"),
        Origin::Decode => format!("malformed answer: {message}"),
        Origin::Peer => message.to_owned(),
    }
}

/// The kind and retry class for a status.
pub fn classify(status: &Status, origin: Origin, stage: Stage) -> (ErrorKind, Retry) {
    let code = status.code();
    let message = status.message();
    // After the process started nothing is safe to re-submit; a file read is idempotent.
    let unsafe_or = |start: Retry| match stage {
        Stage::After => Retry::Unsafe,
        Stage::Submit | Stage::Before => start,
    };
    match origin {
        Origin::Connect => return (ErrorKind::Unavailable, unsafe_or(Retry::SAFE)),
        Origin::Transport | Origin::Timer => {
            let kind = match code {
                Code::Cancelled if message.contains("Timeout expired") => {
                    ErrorKind::Timeout(Deadline::Request)
                }
                _ => ErrorKind::Unavailable,
            };
            let retry = match stage {
                Stage::Submit | Stage::After => Retry::Unsafe,
                Stage::Before => Retry::SAFE,
            };
            return (kind, retry);
        }
        Origin::Decode => {
            return (
                ErrorKind::Protocol,
                match stage {
                    Stage::Before => Retry::Never,
                    _ => Retry::Unsafe,
                },
            );
        }
        Origin::Peer => {}
    }
    match code {
        Code::Ok => (ErrorKind::Protocol, unsafe_or(Retry::Never)),
        Code::Cancelled => (ErrorKind::Cancelled, unsafe_or(Retry::Unsafe)),
        Code::Unknown => (ErrorKind::Internal, unsafe_or(Retry::Unsafe)),
        Code::InvalidArgument => (ErrorKind::InvalidCommand, unsafe_or(Retry::Never)),
        Code::DeadlineExceeded => (
            ErrorKind::Timeout(Deadline::Request),
            unsafe_or(Retry::Unsafe),
        ),
        Code::NotFound => (ErrorKind::NotFound, unsafe_or(Retry::Never)),
        Code::AlreadyExists | Code::Aborted => (ErrorKind::Conflict, unsafe_or(Retry::Never)),
        Code::FailedPrecondition => (ErrorKind::Conflict, unsafe_or(Retry::Never)),
        Code::PermissionDenied => (ErrorKind::PermissionDenied, unsafe_or(Retry::Never)),
        Code::Unauthenticated => (ErrorKind::Unauthenticated, unsafe_or(Retry::Never)),
        // The guest's "maximum concurrent processes limit" and any rate limit in front of it:
        // nothing was started.
        Code::ResourceExhausted => (
            ErrorKind::RateLimited,
            unsafe_or(Retry::Safe {
                after: requested_delay(status),
            }),
        ),
        Code::Unimplemented => (ErrorKind::Unsupported, unsafe_or(Retry::Never)),
        Code::Unavailable => (
            ErrorKind::Unavailable,
            unsafe_or(Retry::Safe {
                after: requested_delay(status),
            }),
        ),
        Code::Internal => {
            if stage == Stage::Submit {
                if let Some(kind) = spawn_failure(message) {
                    // The guest's tracker returns "starting process: …" when exec failed:
                    // no process record exists, nothing ran.
                    return (kind, Retry::Never);
                }
                if PRE_START.iter().any(|p| message.starts_with(p)) {
                    return (ErrorKind::Internal, Retry::SAFE);
                }
            }
            (ErrorKind::Internal, unsafe_or(Retry::Unsafe))
        }
        Code::OutOfRange | Code::DataLoss => (ErrorKind::Protocol, unsafe_or(Retry::Unsafe)),
    }
}

/// Messages of the guest's tracker for failures before the process was spawned.
const PRE_START: &[&str] = &[
    "creating stdout log",
    "creating stderr log",
    "opening stdin pipe",
];

/// The guest runs `exec.Command(argv...).Start()`; its failures come back as INTERNAL
/// `starting process: <Go error>`. A missing program (`exec: "x": executable file not found in
/// $PATH`, `fork/exec /x: no such file or directory`) and a missing working directory (which Go
/// also reports as `fork/exec <program>: no such file or directory`, since the guest sets
/// SysProcAttr) are NotFound; EACCES is PermissionDenied.
pub fn spawn_failure(message: &str) -> Option<ErrorKind> {
    let rest = message.strip_prefix("starting process:")?;
    if rest.contains("executable file not found")
        || rest.contains("no such file or directory")
        || rest.contains("not a directory")
    {
        Some(ErrorKind::NotFound)
    } else if rest.contains("permission denied") {
        Some(ErrorKind::PermissionDenied)
    } else {
        Some(ErrorKind::Internal)
    }
}

/// True for failures of an output stream that a new stream from the last offsets may heal:
/// transport failures, truncated streams and the peer saying it is briefly unavailable.
pub fn resumable(status: &Status) -> bool {
    match origin(status) {
        Origin::Connect | Origin::Transport | Origin::Timer => true,
        // A stream cut before its trailers; a malformed message is not healed by asking again.
        Origin::Decode => grpc::cut_short(status),
        Origin::Peer => matches!(status.code(), Code::Unavailable | Code::Cancelled),
    }
}

/// `google.rpc.Status` details → `google.rpc.RetryInfo.retry_delay`, decoded by hand (the two
/// messages are tiny and stable; no googleapis dependency).
mod rpc_status {
    use std::time::Duration;

    use prost::Message;

    #[derive(Clone, PartialEq, Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
        #[prost(message, repeated, tag = "3")]
        details: Vec<Any>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct Any {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        retry_delay: Option<ProtoDuration>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct ProtoDuration {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }

    pub(super) fn retry_delay(details: &[u8]) -> Option<Duration> {
        if details.is_empty() {
            return None;
        }
        let status = RpcStatus::decode(details).ok()?;
        status
            .details
            .iter()
            .filter(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))
            .find_map(|a| RetryInfo::decode(a.value.as_slice()).ok()?.retry_delay)
            .and_then(|d| {
                let secs = u64::try_from(d.seconds).ok()?;
                let nanos = u32::try_from(d.nanos).ok()?;
                Some(Duration::new(secs, nanos))
            })
    }

    #[cfg(test)]
    pub(super) fn encode_retry_info(delay: Duration) -> Vec<u8> {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: delay.as_secs() as i64,
                nanos: delay.subsec_nanos() as i32,
            }),
        };
        RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: vec![Any {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        }
        .encode_to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(code: Code, msg: &str) -> Status {
        Status::new(code, msg)
    }

    #[test]
    fn start_phase_mapping() {
        let cases: Vec<(Status, ErrorKind, Retry)> = vec![
            (
                peer(Code::Unavailable, "guest restarting"),
                ErrorKind::Unavailable,
                Retry::SAFE,
            ),
            (
                peer(Code::Unauthenticated, "no"),
                ErrorKind::Unauthenticated,
                Retry::Never,
            ),
            (
                peer(Code::NotFound, "target actor \"a/b\" not found"),
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                peer(Code::Internal, "boom"),
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                peer(
                    Code::Internal,
                    "starting process: exec: \"nope\": executable file not found in $PATH",
                ),
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                peer(
                    Code::Internal,
                    "starting process: fork/exec /usr/bin/true: no such file or directory",
                ),
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                peer(
                    Code::Internal,
                    "starting process: fork/exec /x: permission denied",
                ),
                ErrorKind::PermissionDenied,
                Retry::Never,
            ),
            (
                peer(Code::Internal, "creating stdout log: disk full"),
                ErrorKind::Internal,
                Retry::SAFE,
            ),
            (
                peer(
                    Code::ResourceExhausted,
                    "maximum concurrent processes limit reached (10); wait for running processes to exit or signal them",
                ),
                ErrorKind::RateLimited,
                Retry::SAFE,
            ),
            (
                peer(Code::InvalidArgument, "command cannot be empty"),
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                peer(Code::Unimplemented, "unknown method"),
                ErrorKind::Unsupported,
                Retry::Never,
            ),
            (
                Status::internal("failed to decode Protobuf message: buffer underflow"),
                ErrorKind::Protocol,
                Retry::Unsafe,
            ),
            (
                Status::unknown(
                    "protocol error: missing grpc-status trailer, stream was terminated without a final status",
                ),
                ErrorKind::Protocol,
                Retry::Unsafe,
            ),
        ];
        for (status, kind, retry) in cases {
            let msg = status.message().to_owned();
            let e = from_status(status, "exec", Stage::Submit);
            assert_eq!((e.kind(), e.retry()), (kind, retry), "{msg}");
            assert_eq!(e.provider(), "ax");
        }
    }

    #[test]
    fn after_the_start_everything_is_unsafe() {
        for code in [
            Code::Unavailable,
            Code::NotFound,
            Code::ResourceExhausted,
            Code::Internal,
            Code::InvalidArgument,
        ] {
            let e = from_status(Status::new(code, "x"), "exec", Stage::After);
            assert_eq!(e.retry(), Retry::Unsafe, "{code:?}");
        }
    }

    #[test]
    fn pushback_and_retry_info_give_the_delay() {
        let mut s = Status::resource_exhausted("slow down");
        s.metadata_mut()
            .insert("grpc-retry-pushback-ms", "3000".parse().unwrap());
        let e = from_status(s, "exec", Stage::Submit);
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert_eq!(
            e.retry(),
            Retry::Safe {
                after: Some(Duration::from_secs(3))
            }
        );
        let details = rpc_status::encode_retry_info(Duration::from_millis(1500));
        let s = Status::with_details(Code::ResourceExhausted, "slow down", details.into());
        assert_eq!(requested_delay(&s), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn truncated_streams_resume_malformed_ones_do_not() {
        assert!(resumable(&Status::unknown(
            "protocol error: missing grpc-status trailer, stream was terminated without a final status"
        )));
        assert!(resumable(&Status::unavailable("draining")));
        assert!(!resumable(&Status::internal(
            "failed to decode Protobuf message: invalid wire type"
        )));
        assert!(!resumable(&Status::not_found("process \"p\" not found")));
    }
}
