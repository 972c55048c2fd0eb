#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//!
//! # How a command runs
//!
//! - **Session**: [`AgentCoreProvider::create`] calls `StartCodeInterpreterSession`
//!   ([`AgentCoreProvider::connect`] attaches to a given session id); closing an owned handle
//!   calls `StopCodeInterpreterSession`.
//! - **argv** → `executeCommand` takes one shell string: argv is quoted exactly with
//!   [`execseam_adapter_kit::degrade::join`], and **workdir** and **env** are synthesised by the kit's
//!   wrapper ([`degrade::wrapped_command`](execseam_adapter_kit::degrade::wrapped_command), whose own
//!   failures — a missing workdir — become typed errors through `check_wrapped`).
//! - **stdin**: uploaded with `writeFiles` (a base64 `blob`) to a temporary file under the session
//!   root, which the wrapper opens, deletes and redirects from. Without stdin the command's stdin
//!   is `/dev/null` (the service's own stdin is not an empty pipe).
//! - **Exact output** (on by default): the service returns stdout and stderr as JSON strings, and
//!   has been observed to return `\r\n` line endings (a pty). So the command's stdout and stderr
//!   are captured to two files in the sandbox, and the result's stdout carries one frame:
//!   `execseam-exact-v2`, the stdout part, `execseam-exact-stderr`, the stderr part,
//!   `execseam-exact-end <status>`; a part is the stream as it is (`t <bytes>`: at most 16 KiB of
//!   printable ASCII, tab and newline, checked by the shell itself) or base64 (`b`: anything
//!   else). Bytes arrive exactly and separately whatever the transport does; a frame that is
//!   missing or cut is a `Protocol` error, never a guess. It needs bash and, for non-text output,
//!   `base64` in the sandbox (coreutils; present in the AWS image). With `exact_output(false)` the result's
//!   `structuredContent.stdout/stderr` are returned as they are (`binary_output = false`).
//! - **Exit**: `structuredContent.exitCode` (cross-checked with the frame's status). A negative
//!   code is read as a signal (`-9` → `Exit::Signal(9)`), as a Python runner reports one.
//!   `isError: true` with exit 0, or without any exit code, is an infrastructure error.
//! - **Modes** ([`ExecMode`]): `Command` (default) is one `InvokeCodeInterpreter(executeCommand)`;
//!   `Task` is `startCommandExecution` + `getTask` polling, and dropping the exec (a host
//!   deadline, a cancel) sends `stopTask`: `remote_kill` is true only in this mode.
//!
//! # Errors and retries
//!
//! Modelled exceptions, whether the HTTP status of the call or an exception event in the stream,
//! map to [`ErrorKind`](execseam_core::ErrorKind): ValidationException (400) → `InvalidCommand`,
//! ServiceQuotaExceededException (**402**) and ThrottlingException (429) → `RateLimited`,
//! AccessDeniedException (403) → `PermissionDenied`, ResourceNotFoundException (404) → `NotFound`,
//! ConflictException (409) → `Conflict`, InternalServerException (500) → `Internal`; the AWS front
//! door's credential errors (UnrecognizedClientException, InvalidSignatureException, …) →
//! `Unauthenticated`. A `:message-type = error` frame, a frame with a bad CRC, an unparsable event
//! or a stream that ends without a result → `Protocol`.
//!
//! The SDK's automatic retries are **off for every call that submits a command**: the SDK would
//! re-send `InvokeCodeInterpreter` on an HTTP 500 and run the command again. Errors of such calls
//! are `Retry::Unsafe` unless the request was rejected as a whole (a 4xx status, a 429 with its
//! `Retry-After`) or never connected. Session calls and the read-only tools keep the SDK's
//! standard retries (3 attempts).
//!
//! # Files
//!
//! [`AgentCoreExec::read_file`], [`write_file`](AgentCoreExec::write_file),
//! [`list_dir`](AgentCoreExec::list_dir) (sorted by name here, whatever order the service
//! returns) and [`remove_files`](AgentCoreExec::remove_files) use the `readFiles`, `writeFiles`,
//! `listFiles` and `removeFiles` tools. Paths under the session root are sent relative to it.
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod exec;
mod frames;
mod provider;
mod wire;

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, LifecycleCapabilities, SpecSupport};

pub use config::{
    AgentCoreConfig, DEFAULT_IDENTIFIER, DEFAULT_SESSION_ROOT, DEFAULT_SESSION_TIMEOUT, ExecMode,
};
pub use exec::{AgentCoreExec, DirEntry, capabilities_for};
pub use provider::AgentCoreProvider;

/// The capabilities with the default configuration (command mode, exact output).
pub const CAPABILITIES: Capabilities = capabilities_for(ExecMode::Command, true);

/// AgentCore's lifecycle (see [`AgentCoreProvider`]): a sandbox is a Code Interpreter session,
/// started with a lifetime (`sessionTimeoutSeconds`), found, listed (`READY` sessions) and
/// stopped. Sessions carry no labels, image, env or sizes.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        lifetime: true,
        ..SpecSupport::NONE
    },
    options: &["name"],
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The configuration variables [`AgentCoreConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::text("AWS_REGION"),
    Var::text("AWS_DEFAULT_REGION"),
    Var::secret("AWS_ACCESS_KEY_ID"),
    Var::secret("AWS_SECRET_ACCESS_KEY"),
    Var::secret("AWS_SESSION_TOKEN"),
    Var::url("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"),
    Var::url("AWS_ENDPOINT_URL"),
    Var::text("AGENTCORE_CODE_INTERPRETER_ID"),
    Var::seconds("AGENTCORE_SESSION_TIMEOUT_SECONDS"),
    Var::choice("AGENTCORE_EXEC_MODE", &["command", "task"]),
    Var::flag("AGENTCORE_EXACT_OUTPUT"),
    Var::text("AGENTCORE_SESSION_ROOT"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct AgentCore {
        about: "AWS Bedrock AgentCore Code Interpreter (sessions are the sandboxes)",
        config: AgentCoreConfig,
        provider: AgentCoreProvider,
    }

    // Sessions keep no labels, but `ListCodeInterpreterSessions` reports each one's `name`
    // (`CodeInterpreterSessionSummary.name`): a create whose answer was lost is found by a
    // name the guard gives it. (The `clientToken` is documented only as "ignores the request,
    // but does not return an error", not as answering the first session again.)
    const LOST_CREATE: execseam_adapter_kit::guard::LostCreate = execseam_adapter_kit::guard::LostCreate::Named("name");

    fn capabilities(config: &AgentCoreConfig) -> Capabilities {
        capabilities_for(config.exec_mode(), config.is_exact_output())
    }
}

/// The largest command (argv and env) sent, checked before any I/O: the command reaches the
/// sandbox as one `bash -c` script, a single `execve` string of at most 128 KiB
/// (`MAX_ARG_STRLEN`). The check is on that string as sent, wrapper and quoting included
/// (`size::check_wire`); the raw command's size is only its fast lower bound.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::script(
        execseam_adapter_kit::size::MAX_ARG_STRLEN - 1,
        "one bash -c script in the AgentCore sandbox: 128 KiB after wrapping and quoting",
    );

/// The provider name in errors and reports.
pub const PROVIDER: &str = "agentcore";
