use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::lifecycle::SandboxState;
use crate::output::PartialOutput;
use crate::process::StreamOffsets;

/// What went wrong with the infrastructure. A non-zero exit is never one of these.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The command was rejected before any I/O (empty argv, NUL bytes, `=` in an env key,
    /// relative workdir), or the adapter cannot express it on this backend.
    InvalidCommand,
    /// The backend cannot do what was asked (for example streaming on Fly Machines).
    Unsupported,
    /// The adapter's configuration is wrong, found before any I/O: a bad URL, a missing
    /// required setting, a missing credential, an unknown option. (A credential the provider
    /// rejected is [`Unauthenticated`](ErrorKind::Unauthenticated).)
    InvalidConfig,
    /// The provider rejected the credentials (a missing one is
    /// [`InvalidConfig`](ErrorKind::InvalidConfig)).
    Unauthenticated,
    /// Credentials are valid but not allowed to do this.
    PermissionDenied,
    /// The sandbox, process, file or workdir does not exist.
    NotFound,
    /// A conflicting state (a lease held by someone else, a busy session).
    Conflict,
    /// The provider asked us to slow down.
    RateLimited,
    /// The provider or the sandbox could not be reached or is temporarily unable to serve.
    Unavailable,
    /// A deadline fired; which one is named.
    Timeout(Deadline),
    /// The caller cancelled.
    Cancelled,
    /// The provider's answer broke the protocol: malformed, truncated, or missing the exit status.
    Protocol,
    /// Output exceeded a limit of the provider or of the host.
    OutputLimit,
    /// What was asked for is no longer retained (a started command's output before the first
    /// offset the sandbox still keeps, or its whole record): [`Error::retained_from`] says where
    /// the retained output starts, when anything is left.
    Expired,
    /// Anything else on the provider's side (HTTP 500 and friends).
    Internal,
}

/// Which deadline fired for an [`ErrorKind::Timeout`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deadline {
    /// One request to the provider took too long.
    Request,
    /// The command's own deadline (set by the host or the adapter) expired; it was killed.
    Command,
    /// The sandbox's lifetime ended.
    SandboxLifetime,
    /// The provider reported a timeout without saying which.
    Unknown,
}

/// Whether the operation may be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Retry {
    /// Retrying would fail the same way.
    Never,
    /// Nothing ran; retrying is safe, after the given delay if the provider named one.
    Safe {
        /// The provider's `Retry-After` (or equivalent), if any.
        after: Option<Duration>,
    },
    /// The command may already have run: retrying could run it twice.
    Unsafe,
}

impl Retry {
    /// `Retry::Safe { after: None }`.
    pub const SAFE: Retry = Retry::Safe { after: None };

    /// True only for [`Retry::Safe`].
    pub fn is_safe(&self) -> bool {
        matches!(self, Retry::Safe { .. })
    }

    /// The delay asked for by the provider, if any.
    pub fn after(&self) -> Option<Duration> {
        match self {
            Retry::Safe { after } => *after,
            _ => None,
        }
    }
}

/// A transport status reported alongside an error, where known.
///
/// `#[non_exhaustive]`: a transport with its own status space (a WebSocket close code, say) may
/// be added.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum WireStatus {
    /// An HTTP status code.
    Http(u16),
    /// A gRPC (or Connect) status code number.
    Grpc(i32),
}

/// An infrastructure failure: one struct with a kind, a retry class and context.
///
/// `Display` is one line. No token, env value or stdin is ever put in an `Error` by this
/// workspace's adapters; messages quote the provider, not the request.
pub struct Error {
    // Boxed: a `Result<T, Error>` stays one pointer wide on the error side.
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    retry: Retry,
    provider: Cow<'static, str>,
    operation: Cow<'static, str>,
    status: Option<WireStatus>,
    code: Option<String>,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
    partial: Option<Box<PartialOutput>>,
    retained_from: Option<StreamOffsets>,
    sandbox_state: Option<SandboxState>,
}

/// Cuts `message` to at most [`Error::MAX_MESSAGE`] bytes (on a character boundary), saying how
/// much was cut.
fn cap_message(mut message: String) -> String {
    if message.len() <= Error::MAX_MESSAGE {
        return message;
    }
    let total = message.len();
    let mut end = Error::MAX_MESSAGE - 40;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(&format!("… ({} more bytes)", total - end));
    message
}

impl Error {
    /// The longest message an error keeps, in bytes.
    pub const MAX_MESSAGE: usize = 1024;

    /// A new error with [`Retry::Never`]; set the rest with the `with_*` methods.
    ///
    /// The message is cut at [`Error::MAX_MESSAGE`] bytes: a provider that echoes a request (a
    /// 10 MiB argv) or answers with a huge body must not make the error as large.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                retry: Retry::Never,
                provider: Cow::Borrowed(""),
                operation: Cow::Borrowed(""),
                status: None,
                code: None,
                message: cap_message(message.into()),
                source: None,
                partial: None,
                retained_from: None,
                sandbox_state: None,
            }),
        }
    }

    /// Shorthand for an [`ErrorKind::Protocol`] error, which is always [`Retry::Unsafe`] unless
    /// changed: a malformed answer says nothing about whether the command ran.
    pub fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, message).with_retry(Retry::Unsafe)
    }

    /// Shorthand for an [`ErrorKind::Unsupported`] error.
    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unsupported, message)
    }

    /// Shorthand for an [`ErrorKind::InvalidConfig`] error (operation `config` unless changed).
    pub fn invalid_config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidConfig, message).with_operation("config")
    }

    /// Records the sandbox's state as the cause ([`sandbox_state`](Self::sandbox_state)).
    pub fn with_sandbox_state(mut self, state: SandboxState) -> Self {
        self.inner.sandbox_state = Some(state);
        self
    }

    /// Fills provider and operation only where they are still empty (for adapters that wrap
    /// errors from shared helpers).
    #[must_use]
    pub fn or_context(
        mut self,
        provider: impl Into<Cow<'static, str>>,
        operation: impl Into<Cow<'static, str>>,
    ) -> Self {
        if self.inner.provider.is_empty() {
            self.inner.provider = provider.into();
        }
        if self.inner.operation.is_empty() {
            self.inner.operation = operation.into();
        }
        self
    }

    /// Takes the partial output out of the error.
    pub fn take_partial(&mut self) -> Option<PartialOutput> {
        self.inner.partial.take().map(|b| *b)
    }
}

setters!(Error {
    /// Sets the retry class.
    with_retry(retry: Retry) => inner.retry = retry;
    /// Sets the provider name (`"fly"`, `"e2b"`, …).
    with_provider(provider: impl Into<Cow<'static, str>>) => inner.provider = provider.into();
    /// Sets the operation that failed (`"exec"`, `"create_sandbox"`, …).
    with_operation(operation: impl Into<Cow<'static, str>>) => inner.operation = operation.into();
    /// Sets the transport status.
    with_status(status: WireStatus) => inner.status = Some(status);
    /// Sets the provider's own error code (`"CONTAINER_UNAVAILABLE"`, …).
    with_code(code: impl Into<String>) => inner.code = Some(code.into());
    /// Attaches the underlying error.
    with_source(source: impl StdError + Send + Sync + 'static) => inner.source = Some(Box::new(source));
    /// Attaches the output collected before the failure (a deadline, a cut stream).
    with_partial(partial: PartialOutput) => inner.partial = Some(Box::new(partial));
    /// Records the first offsets still retained (for [`ErrorKind::Expired`]).
    with_retained_from(from: StreamOffsets) => inner.retained_from = Some(from);
});

getters!(Error {
    /// The kind.
    kind -> ErrorKind = copy(inner.kind);
    /// The retry class.
    retry -> Retry = copy(inner.retry);
    /// The provider name, or `""`.
    provider -> &str = ref(inner.provider);
    /// The operation, or `""`.
    operation -> &str = ref(inner.operation);
    /// The transport status, if known.
    status -> Option<WireStatus> = copy(inner.status);
    /// The provider's error code, if any.
    code -> Option<&str> = deref(inner.code);
    /// The message.
    message -> &str = ref(inner.message);
    /// The state the sandbox was found in when that state is why the operation failed (an exec
    /// on a paused sandbox: [`Conflict`](ErrorKind::Conflict) with `Some(Paused)`).
    sandbox_state -> Option<SandboxState> = copy(inner.sandbox_state);
    /// Output collected before the failure, if any.
    partial -> Option<&PartialOutput> = deref(inner.partial);
    /// For [`ErrorKind::Expired`]: the first offsets of a started command's output still
    /// retained (read from there, or accept the gap knowingly); `None` when nothing is left.
    retained_from -> Option<StreamOffsets> = copy(inner.retained_from);
});

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ErrorKind::InvalidCommand => "invalid command",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::RateLimited => "rate limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout(Deadline::Request) => "timeout (request)",
            ErrorKind::Timeout(Deadline::Command) => "timeout (command deadline)",
            ErrorKind::Timeout(Deadline::SandboxLifetime) => "timeout (sandbox lifetime)",
            ErrorKind::Timeout(Deadline::Unknown) => "timeout (unspecified)",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::OutputLimit => "output limit exceeded",
            ErrorKind::Expired => "no longer retained",
            ErrorKind::Internal => "internal error",
        };
        f.write_str(s)
    }
}

impl fmt::Display for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retry::Never => f.write_str("never"),
            Retry::Safe { after: None } => f.write_str("safe"),
            Retry::Safe { after: Some(d) } => write!(f, "safe after {}ms", d.as_millis()),
            Retry::Unsafe => f.write_str("unsafe (may have run)"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match (
            self.inner.provider.is_empty(),
            self.inner.operation.is_empty(),
        ) {
            (true, true) => String::new(),
            (false, true) => format!("{}: ", self.inner.provider),
            (true, false) => format!("{}: ", self.inner.operation),
            (false, false) => format!("{} {}: ", self.inner.provider, self.inner.operation),
        };
        // One line, always: newlines in provider messages are escaped.
        let message = self.inner.message.replace('\n', "\\n").replace('\r', "\\r");
        write!(f, "{who}{}: {message}", self.inner.kind)?;
        let mut extra = Vec::new();
        match self.inner.status {
            Some(WireStatus::Http(s)) => extra.push(format!("http {s}")),
            Some(WireStatus::Grpc(c)) => extra.push(format!("grpc {c}")),
            None => {}
        }
        if let Some(code) = &self.inner.code {
            extra.push(format!("code {code}"));
        }
        extra.push(format!("retry {}", self.inner.retry));
        write!(f, " [{}]", extra.join(", "))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.inner.kind)
            .field("retry", &self.inner.retry)
            .field("provider", &self.inner.provider)
            .field("operation", &self.inner.operation)
            .field("status", &self.inner.status)
            .field("code", &self.inner.code)
            .field("message", &self.inner.message)
            .field("source", &self.inner.source)
            .field("partial", &self.inner.partial)
            .field("retained_from", &self.inner.retained_from)
            .field("sandbox_state", &self.inner.sandbox_state)
            .finish()
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_with_context() {
        let e = Error::new(ErrorKind::RateLimited, "slow down\nplease")
            .with_provider("fly")
            .with_operation("exec")
            .with_status(WireStatus::Http(429))
            .with_code("rate_limited")
            .with_retry(Retry::Safe {
                after: Some(Duration::from_secs(2)),
            });
        let s = e.to_string();
        assert_eq!(
            s,
            "fly exec: rate limited: slow down\\nplease [http 429, code rate_limited, retry safe after 2000ms]"
        );
        assert!(!s.contains('\n'));
    }

    #[test]
    fn long_messages_are_cut() {
        let e = Error::new(ErrorKind::Internal, "é".repeat(10_000));
        assert!(
            e.message().len() <= Error::MAX_MESSAGE,
            "{}",
            e.message().len()
        );
        assert!(e.message().ends_with("more bytes)"), "{}", e.message());
        let short = Error::new(ErrorKind::Internal, "x".repeat(Error::MAX_MESSAGE));
        assert_eq!(short.message().len(), Error::MAX_MESSAGE);
    }

    #[test]
    fn protocol_errors_default_to_unsafe() {
        assert_eq!(Error::protocol("cut").retry(), Retry::Unsafe);
        assert_eq!(Error::new(ErrorKind::Internal, "x").retry(), Retry::Never);
    }

    #[test]
    fn retry_after_only_on_safe() {
        let d = Some(Duration::from_millis(5));
        assert_eq!(Retry::Safe { after: d }.after(), d);
        assert_eq!(Retry::Unsafe.after(), None);
        assert!(!Retry::Unsafe.is_safe());
    }
}
