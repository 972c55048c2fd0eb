//! The local adapter's errors: the few infrastructure failures a host process can have.

use execseam_core::{Error, ErrorKind};

use crate::PROVIDER;

pub(crate) fn error(kind: ErrorKind, message: impl Into<String>) -> Error {
    Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_operation("exec")
}
