//! The gRPC plumbing every tonic adapter shares, written once: where a [`Status`] came from
//! ([`origin`]: the peer's word, or a connection, a timer, a transport or a decoder of ours),
//! what that says about how far the call got ([`Origin::no_answer`]), the canonical code names,
//! and gRFC A6's `grpc-retry-pushback-ms` ([`pushback`]).

use std::error::Error as StdError;
use std::time::Duration;

use tonic::{Code, Status};

use crate::retry::NoAnswer;
use crate::text;

/// Where a [`Status`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The connection could not be opened: the request never left.
    Connect,
    /// Our own per-call timer fired (a status the adapter made with its timer's message).
    Timer,
    /// The transport failed after the request may have been sent (reset, h2 error, keepalive).
    Transport,
    /// tonic rejected what came back (a malformed message, missing trailers, an oversized
    /// message).
    Decode,
    /// The peer sent this status: its word.
    Peer,
}

impl Origin {
    /// What a status of this origin says about the call, when it is not the peer's word.
    pub fn no_answer(self) -> Option<NoAnswer> {
        match self {
            Origin::Connect => Some(NoAnswer::Connect),
            Origin::Timer => Some(NoAnswer::Timeout),
            Origin::Transport => Some(NoAnswer::Cut),
            Origin::Decode => Some(NoAnswer::Malformed),
            Origin::Peer => None,
        }
    }
}

/// The messages tonic and prost use for statuses they create while decoding a response.
pub const DECODE_PREFIXES: &[&str] = &[
    "failed to decode Protobuf message",
    "protocol error:",
    "Unexpected EOF decoding stream",
    "Error, decoded message length too large",
    "Error decompressing",
];

/// Where `status` came from. `timer` is the start of the message of the statuses the adapter's
/// own timer makes, if it has one.
pub fn origin(status: &Status, timer: Option<&str>) -> Origin {
    if let Some(source) = status.source() {
        // tonic wraps a connect failure in its transport error; the chain's text names it.
        let mut connect = text::error_chain(source).contains("tcp connect error");
        let mut cur: Option<&(dyn StdError + 'static)> = Some(source);
        while let Some(e) = cur {
            connect |= e.downcast_ref::<tonic::ConnectError>().is_some();
            cur = e.source();
        }
        return if connect {
            Origin::Connect
        } else {
            Origin::Transport
        };
    }
    if timer.is_some_and(|t| status.message().starts_with(t)) {
        return Origin::Timer;
    }
    if DECODE_PREFIXES
        .iter()
        .any(|p| status.message().starts_with(p))
    {
        return Origin::Decode;
    }
    Origin::Peer
}

/// A stream tonic saw end before its trailers (`missing grpc-status trailer`, an EOF inside a
/// message): a [`Origin::Decode`] status that a new stream may heal, unlike a malformed message.
pub fn cut_short(status: &Status) -> bool {
    let message = status.message();
    message.starts_with("protocol error: missing grpc-status trailer")
        || message.starts_with("Unexpected EOF decoding stream")
}

/// The delay a status asks for in gRFC A6's `grpc-retry-pushback-ms` metadata, if any.
pub fn pushback(status: &Status) -> Option<Duration> {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_pushback() {
        assert_eq!(origin(&Status::unavailable("down"), None), Origin::Peer);
        assert_eq!(
            origin(
                &Status::internal("failed to decode Protobuf message: x"),
                None
            ),
            Origin::Decode
        );
        assert_eq!(
            origin(&Status::deadline_exceeded("t: no answer"), Some("t:")),
            Origin::Timer
        );
        let mut s = Status::resource_exhausted("slow");
        s.metadata_mut()
            .insert("grpc-retry-pushback-ms", "1500".parse().unwrap());
        assert_eq!(pushback(&s), Some(Duration::from_millis(1500)));
        assert_eq!(Origin::Peer.no_answer(), None);
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
    }
}
