//! Engine failures as typed errors, never exit codes.
//!
//! Each request is classified by what repeating it could do ([`Effect`]); the kind and retry
//! class come from `execseam_adapter_kit::retry` (`http_status` for the engine's answers, `no_answer`
//! for the transport), with these overrides, each observed on podman 4.3's compat API or taken
//! from Docker's:
//!
//! | answer | kind | why |
//! |---|---|---|
//! | 404, or podman's 500 `… no such container` | `NotFound` | podman answers 500 for a container removed under a running exec |
//! | Docker's 409 `… is paused, unpause the container before exec`, podman's 409 `… is paused` | `Conflict`, sandbox state `Paused` | an exec into a paused container: resume it first (never a hang) |
//! | Docker's 409 `… is not running`, podman's 500 `… container state improper` | `NotFound` | an exec into a stopped container: the sandbox is not there to run it |
//! | anything after the exec was started | retry `Unsafe` (unless `Never`) | the command may have run, whichever request failed |
//! | bollard's `SocketNotFoundError` | `Unavailable` | no engine at that path |
//! | a malformed answer (JSON, base64, a missing header) | `Protocol` | |

use bollard::errors::Error as EngineError;
use execseam_adapter_kit::retry::{self, NoAnswer, Stage};
use execseam_adapter_kit::text;
use execseam_core::{Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;

pub(crate) fn engine(operation: &'static str, stage: Stage, e: EngineError) -> Error {
    engine_hint(operation, stage, e, "")
}

/// [`engine`], with `hint` (what the user can do about it) appended to the message.
pub(crate) fn engine_hint(
    operation: &'static str,
    stage: Stage,
    e: EngineError,
    hint: &str,
) -> Error {
    let effect = stage;
    let too_large = answer_too_large(&e);
    let paused =
        matches!(&e, EngineError::DockerResponseServerError { message, .. } if is_paused(message));
    let (kind, mut retry, status) = match &e {
        _ if too_large => {
            let (k, r) = retry::no_answer(NoAnswer::Malformed, effect);
            (k, r, None)
        }
        EngineError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let (kind, retry) = if paused {
                (ErrorKind::Conflict, Retry::Never)
            } else if is_gone(&e) || not_running(message) {
                (ErrorKind::NotFound, Retry::Never)
            } else {
                retry::http_status(*status_code, effect, None)
            };
            (kind, retry, Some(WireStatus::Http(*status_code)))
        }
        EngineError::SocketNotFoundError(_) => {
            let (k, r) = retry::no_answer(NoAnswer::Connect, effect);
            (k, r, None)
        }
        EngineError::HyperLegacyError { err } if err.is_connect() => {
            let (k, r) = retry::no_answer(NoAnswer::Connect, effect);
            (k, r, None)
        }
        EngineError::RequestTimeoutError => {
            let (k, r) = retry::no_answer(NoAnswer::Timeout, effect);
            (k, r, None)
        }
        EngineError::JsonDataError { .. }
        | EngineError::JsonSerdeError { .. }
        | EngineError::HttpHeaderNotFoundError(_)
        | EngineError::HttpHeaderToStrError { .. }
        | EngineError::Base64DecodeError { .. }
        | EngineError::APIVersionParseError {} => {
            let (k, r) = retry::no_answer(NoAnswer::Malformed, effect);
            (k, r, None)
        }
        EngineError::HyperLegacyError { .. }
        | EngineError::HyperResponseError { .. }
        | EngineError::IOError { .. } => {
            let (k, r) = retry::no_answer(NoAnswer::Cut, effect);
            (k, r, None)
        }
        EngineError::UnsupportedURISchemeError { .. } => {
            (ErrorKind::InvalidConfig, Retry::Never, None)
        }
        _ => {
            let (k, r) = retry::no_answer(NoAnswer::Other, effect);
            (k, r, None)
        }
    };
    // Once the exec was started the command may have run, even if this request never left.
    retry = stage.settle(retry);
    let mut message = match &e {
        EngineError::DockerResponseServerError { message, .. } => message.clone(),
        EngineError::SocketNotFoundError(path) => {
            format!("no engine socket at {path} (is the engine running? DOCKER_HOST)")
        }
        _ => text::error_chain(&e),
    };
    if !hint.is_empty() {
        message = format!("{message} ({hint})");
    }
    let mut err = Error::new(kind, message)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(operation)
        .with_source(e);
    if let Some(s) = status {
        err = err.with_status(s);
    }
    if paused {
        err = err.with_sandbox_state(execseam_core::SandboxState::Paused);
    }
    err
}

/// Whether a read failed on the answer cap ([`crate::client::capped`]): somewhere in the error's
/// source chain.
fn answer_too_large(e: &EngineError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<crate::client::capped::AnswerTooLarge>() {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io
                .get_ref()
                .is_some_and(|i| i.is::<crate::client::capped::AnswerTooLarge>())
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether the engine says the container (or exec) does not exist: Docker answers 404, podman
/// 4.3 sometimes 500 `… does not exist in database: no such container`.
pub(crate) fn is_gone(e: &EngineError) -> bool {
    match e {
        EngineError::DockerResponseServerError {
            status_code,
            message,
        } => *status_code == 404 || message.contains("no such container"),
        _ => false,
    }
}

/// Docker answers 409 `container … is not running`; podman 500 `… container state improper`.
/// Docker: `Container … is paused, unpause the container before exec`; podman 4.3: `cannot
/// create exec session as container … is paused`.
fn is_paused(message: &str) -> bool {
    message.contains(" is paused")
}

fn not_running(message: &str) -> bool {
    message.contains("is not running") || message.contains("state improper")
}

/// podman's transient `stopped` state (exited, not yet cleaned up), which Docker's schema and so
/// bollard's typed answers do not have.
pub(crate) fn is_podman_stopped_state(e: &EngineError) -> bool {
    matches!(e, EngineError::JsonDataError { message, .. } if message.contains("unknown variant `stopped`"))
}

/// A typed error of this adapter that is not a failed request.
pub(crate) fn adapter(
    kind: ErrorKind,
    retry: Retry,
    operation: &'static str,
    message: impl Into<String>,
) -> Error {
    Error::new(kind, message)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(operation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(status_code: u16, message: &str) -> EngineError {
        EngineError::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        }
    }

    #[test]
    fn engine_answers_map_to_kinds_and_retry_classes() {
        let cases = [
            (
                server(404, "no such image"),
                Stage::Submit,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                server(
                    500,
                    "can only create exec sessions on running containers: container state improper",
                ),
                Stage::Before,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                server(
                    500,
                    "container abc does not exist in database: no such container",
                ),
                Stage::After,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                server(409, "Container abc is not running"),
                Stage::Before,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                server(409, "name in use"),
                Stage::Submit,
                ErrorKind::Conflict,
                Retry::Never,
            ),
            (
                server(500, "boom"),
                Stage::Before,
                ErrorKind::Internal,
                Retry::SAFE,
            ),
            (
                server(500, "boom"),
                Stage::Submit,
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                server(500, "boom"),
                Stage::After,
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                server(400, "bad parameter"),
                Stage::Submit,
                ErrorKind::InvalidCommand,
                Retry::Never,
            ),
            (
                EngineError::SocketNotFoundError("/x.sock".into()),
                Stage::Submit,
                ErrorKind::Unavailable,
                Retry::SAFE,
            ),
            (
                // The exec had started: a follow-up request that never left still may not be redone.
                EngineError::SocketNotFoundError("/x.sock".into()),
                Stage::After,
                ErrorKind::Unavailable,
                Retry::Unsafe,
            ),
            (
                EngineError::RequestTimeoutError,
                Stage::After,
                ErrorKind::Timeout(execseam_core::Deadline::Request),
                Retry::Unsafe,
            ),
        ];
        for (e, stage, kind, retry) in cases {
            let shown = e.to_string();
            let err = engine("op", stage, e);
            assert_eq!((err.kind(), err.retry()), (kind, retry), "{shown}");
            assert_eq!(err.provider(), PROVIDER);
            assert_eq!(err.operation(), "op");
        }
    }
}
