//! Engine failures as typed errors: never an exit code.

use bollard::errors::Error as EngineError;
use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};

use crate::PROVIDER;

/// The kind of a configuration error.
pub(crate) const INVALID_CONFIG: ErrorKind = ErrorKind::InvalidCommand;

pub(crate) fn invalid_config(message: impl Into<String>) -> Error {
    Error::new(INVALID_CONFIG, message)
        .with_retry(Retry::Never)
        .with_provider(PROVIDER)
        .with_operation("configure")
}

/// Whether the command may have started when a request failed: decides the retry class of a
/// transport failure or a 5xx.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Nothing ran yet (create, start, inspect, list): retrying is safe.
    Before,
    /// The exec was started, or may have been: retrying could run the command twice.
    Started,
}

impl Stage {
    fn retry(self) -> Retry {
        match self {
            Stage::Before => Retry::SAFE,
            Stage::Started => Retry::Unsafe,
        }
    }
}

pub(crate) fn engine(operation: &'static str, stage: Stage, e: EngineError) -> Error {
    engine_hint(operation, stage, e, "")
}

/// [`engine`], with `hint` appended to the message (what the user can do about it).
pub(crate) fn engine_hint(
    operation: &'static str,
    stage: Stage,
    e: EngineError,
    hint: &str,
) -> Error {
    let (kind, retry, status, mut message) = match &e {
        EngineError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let code = *status_code;
            let (kind, retry) = match code {
                400 => (ErrorKind::InvalidCommand, Retry::Never),
                401 => (ErrorKind::Unauthenticated, Retry::Never),
                403 => (ErrorKind::PermissionDenied, Retry::Never),
                404 => (ErrorKind::NotFound, Retry::Never),
                // podman answers 500 for a container it no longer has
                _ if message.contains("no such container") => (ErrorKind::NotFound, Retry::Never),
                429 => (ErrorKind::RateLimited, Retry::SAFE),
                _ if not_running(message) => (ErrorKind::NotFound, Retry::Never),
                409 => (ErrorKind::Conflict, Retry::Never),
                503 => (ErrorKind::Unavailable, stage.retry()),
                _ => (ErrorKind::Internal, stage.retry()),
            };
            (kind, retry, Some(WireStatus::Http(code)), message.clone())
        }
        EngineError::SocketNotFoundError(path) => (
            ErrorKind::Unavailable,
            stage.retry(),
            None,
            format!("no engine socket at {path} (is the engine running? DOCKER_HOST)"),
        ),
        // Nothing of this request was sent; whether the command runs already is the stage's say.
        EngineError::HyperLegacyError { err } if err.is_connect() => (
            ErrorKind::Unavailable,
            stage.retry(),
            None,
            format!("cannot connect to the engine: {e}"),
        ),
        EngineError::RequestTimeoutError => (
            ErrorKind::Timeout(Deadline::Request),
            stage.retry(),
            None,
            "the engine did not answer within the request timeout".to_owned(),
        ),
        EngineError::JsonDataError { .. }
        | EngineError::JsonSerdeError { .. }
        | EngineError::HttpHeaderNotFoundError(_)
        | EngineError::HttpHeaderToStrError { .. }
        | EngineError::Base64DecodeError { .. }
        | EngineError::APIVersionParseError {} => (
            ErrorKind::Protocol,
            stage.retry(),
            None,
            format!("malformed engine answer: {e}"),
        ),
        EngineError::HyperLegacyError { .. }
        | EngineError::HyperResponseError { .. }
        | EngineError::IOError { .. } => (
            ErrorKind::Unavailable,
            stage.retry(),
            None,
            format!("the engine connection failed: {e}"),
        ),
        EngineError::UnsupportedURISchemeError { uri } => (
            INVALID_CONFIG,
            Retry::Never,
            None,
            format!("engine address {uri:?}: unsupported scheme"),
        ),
        _ => (ErrorKind::Internal, stage.retry(), None, e.to_string()),
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
    err
}

/// Whether the engine says the container (or exec) does not exist: Docker answers 404, podman
/// 4.3 sometimes 500 "… does not exist in database: no such container".
pub(crate) fn is_gone(e: &EngineError) -> bool {
    match e {
        EngineError::DockerResponseServerError {
            status_code,
            message,
        } => *status_code == 404 || message.contains("no such container"),
        _ => false,
    }
}

/// Docker answers 409 "container … is not running"; podman 500 "container state improper".
fn not_running(message: &str) -> bool {
    message.contains("is not running") || message.contains("state improper")
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
                Stage::Before,
                ErrorKind::NotFound,
                Retry::Never,
            ),
            (
                // podman 4.3 on an exec into a stopped container
                server(
                    500,
                    "can only create exec sessions on running containers: container state improper",
                ),
                Stage::Before,
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
                Stage::Before,
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
                Stage::Started,
                ErrorKind::Internal,
                Retry::Unsafe,
            ),
            (
                EngineError::SocketNotFoundError("/x.sock".into()),
                Stage::Before,
                ErrorKind::Unavailable,
                Retry::SAFE,
            ),
            (
                EngineError::RequestTimeoutError,
                Stage::Started,
                ErrorKind::Timeout(Deadline::Request),
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
