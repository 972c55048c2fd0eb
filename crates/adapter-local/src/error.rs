//! The local adapter's errors: the few infrastructure failures a host process can have.

use std::process::ExitStatus;

use execseam_core::{Error, ErrorKind, Exit, Retry};

use crate::PROVIDER;

pub(crate) fn error(kind: ErrorKind, message: impl Into<String>) -> Error {
    Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_operation("exec")
}

pub(crate) fn exit_of(status: ExitStatus) -> Result<Exit, Error> {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        Ok(Exit::Code(code))
    } else if let Some(sig) = status.signal() {
        Ok(Exit::Signal(sig))
    } else {
        Err(
            Error::protocol(format!("unrecognised exit status {status:?}"))
                .with_provider(PROVIDER)
                .with_operation("exec"),
        )
    }
}

pub(crate) fn io_error(what: &str, e: std::io::Error) -> Error {
    error(ErrorKind::Internal, format!("{what}: {e}"))
        .with_retry(Retry::Unsafe)
        .with_source(e)
}
