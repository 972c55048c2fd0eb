use crate::command::Tool;
use crate::process::ProcessCapabilities;

/// How a part of a [`Command`](crate::Command) reaches the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// The backend's API has a field for it.
    Native,
    /// The adapter wraps the command in `sh -c` (the adapter kit's `degrade`); for argv this
    /// means exact POSIX quoting into one string.
    ShellWrapped,
    /// The adapter writes it to a temporary file in the sandbox and redirects from it.
    TempFile,
    /// The adapter cannot deliver it; commands that need it fail with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    Unsupported,
}

impl Delivery {
    /// True unless [`Delivery::Unsupported`].
    pub fn is_supported(&self) -> bool {
        !matches!(self, Delivery::Unsupported)
    }
}

/// What an adapter can do, filled in literally by each adapter and read by the conformance suite
/// to decide which cases apply (a case that does not apply is reported with the field that rules it
/// out, never skipped silently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// How argv is delivered: [`Delivery::Native`] (an array) or [`Delivery::ShellWrapped`]
    /// (quoted into one string).
    pub argv: Delivery,
    /// How stdin is delivered.
    pub stdin: Delivery,
    /// How the working directory is delivered.
    pub workdir: Delivery,
    /// How environment variables are delivered.
    pub env: Delivery,
    /// The adapter implements [`ExecStream`](crate::ExecStream).
    pub streaming: bool,
    /// Dropping an exec (deadline, cancel) kills the command in the sandbox.
    pub remote_kill: bool,
    /// stdout and stderr bytes arrive exactly; false where the transport decodes them as text.
    pub binary_output: bool,
    /// The largest stdin the adapter accepts, in bytes, if limited.
    pub max_stdin: Option<u64>,
    /// The most output (per stream) the backend returns, in bytes, if limited.
    pub max_output: Option<u64>,
    /// Tools the adapter serves natively (a listing API instead of `find`), returning the same
    /// bytes the command would.
    pub native_tools: &'static [Tool],
    /// Process handles ([`Exec::processes`](crate::Exec::processes)) and what they can do;
    /// `None` when the adapter has none.
    pub processes: Option<ProcessCapabilities>,
}

impl Capabilities {
    /// The capabilities of a backend that takes everything natively, streams and kills: the
    /// local adapter's.
    pub const FULL: Capabilities = Capabilities {
        argv: Delivery::Native,
        stdin: Delivery::Native,
        workdir: Delivery::Native,
        env: Delivery::Native,
        streaming: true,
        remote_kill: true,
        binary_output: true,
        max_stdin: None,
        max_output: None,
        native_tools: &[],
        processes: None,
    };
}
