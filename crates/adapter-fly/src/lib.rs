#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! # Capabilities ([`CAPABILITIES`])
//!
//! | field | value | how |
//! |---|---|---|
//! | argv | native | the `command` array (never the deprecated `cmd` string); inside the wrapper, quoted exactly |
//! | stdin | temp file | text stdin goes natively in the `stdin` string; binary stdin is base64 in `stdin`, decoded by the wrapper into a temporary file under [`FlyConfig::temp_dir`] that is removed before the command runs |
//! | workdir | shell-wrapped | the API has no cwd field: `/bin/sh -c 'cd -- DIR …'`; a missing workdir is `Err(NotFound)` |
//! | env | shell-wrapped | the API has no env field: `exec env -- K=V … prog` on top of the machine's environment |
//! | streaming | no | the API answers once, with everything (`streaming()` is `None`) |
//! | remote_kill | no | there is no exec id and no kill route; dropping the exec leaves the command running until its `timeout` |
//! | binary_output | no | stdout and stderr are JSON strings: invalid UTF-8 arrives as U+FFFD |
//! | max_stdin | 1 MiB | flyctl's own cap (configurable); larger stdin is `InvalidCommand` before any request |
//! | max_output | 2 MiB | the observed safe size; above it the API answers with an output-limit error (`ErrorKind::OutputLimit`) |
//!
//! The wrapper (`execseam_adapter_kit::degrade`) needs `/bin/sh`, `env` and, for binary stdin, `base64`
//! in the machine's image; commands without workdir, env or binary stdin are sent as bare argv and
//! need nothing.
//!
//! # Quirks
//!
//! - **HTTP 200 does not mean success**: a non-zero `exit_code` is an `Ok` result.
//! - **Zero values are omitted** (`flydv1.ExecResponse` is protobuf-encoded): a missing
//!   `exit_code` is 0, missing streams are empty. A body that is not such an object is
//!   `Err(Protocol)`, as is a negative `exit_code` without an `exit_signal`.
//! - **`exit_signal`** (dropped by fly-go) becomes [`Exit::Signal`](execseam_core::Exit::Signal).
//! - **Never re-sent**: reqwest's retries are off; a 502/503 on the exec is an `Err` with
//!   `Retry::Unsafe` (fly-go's transport would re-send the POST and run the command twice).
//! - **Timeouts**: every exec sends `timeout` ([`FlyConfig::exec_timeout`], 120 s by default); the
//!   HTTP request may take 30 s longer, so the server's deadline fires first. The server's
//!   timeout answer (408 / `deadline_exceeded`) is `Timeout(Command)` with `Retry::Unsafe`.
//! - **The machine must be started**: connect and create start it and wait
//!   ([`FlyExec::ensure_started`]).
//!
//! Error mapping: see `docs/adapters/fly.md`.
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, Delivery, LifecycleCapabilities, SpecSupport};

mod client;
mod config;
mod error;
mod exec;
mod provider;
mod wire;

pub use config::{DEFAULT_BASE_URL, DEFAULT_MAX_ANSWER_BYTES, FlyConfig};
pub use exec::FlyExec;
pub use provider::FlyProvider;

/// The capabilities with the default configuration (see the [crate docs](crate)).
pub const CAPABILITIES: Capabilities = Capabilities {
    stdin: Delivery::TempFile,
    workdir: Delivery::ShellWrapped,
    env: Delivery::ShellWrapped,
    streaming: false,
    remote_kill: false,
    binary_output: false,
    max_stdin: Some(1 << 20),
    max_output: Some(2 << 20),
    processes: Some(execseam_adapter_kit::spool::SPOOLED),
    ..Capabilities::FULL
};

/// Fly's lifecycle (see [`FlyProvider`]): machines of one app, created from an image with env,
/// metadata labels, CPUs and memory; connect, list, destroy; pause is Fly's suspend (memory
/// and processes kept; connect starts, so resumes, a suspended machine; an exec is refused).
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        image: true,
        env: true,
        labels: true,
        cpu: true,
        memory: true,
        ..SpecSupport::NONE
    },
    state: execseam_core::StateCapabilities {
        pause: Some(execseam_core::PauseSupport {
            kinds: &[execseam_core::Kept::FilesystemAndMemory],
            scope: execseam_core::Scope::Root,
            while_paused: execseam_core::WhilePaused::Refused,
            connect_resumes: true,
        }),
        ..execseam_core::StateCapabilities::NONE
    },
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The configuration variables [`FlyConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::secret("FLY_API_TOKEN").required(),
    Var::text("FLY_APP_NAME").required(),
    Var::url("FLY_FLAPS_BASE_URL"),
    Var::seconds("FLY_EXEC_TIMEOUT"),
    Var::text("FLY_EXEC_CONTAINER"),
    Var::text("EXECSEAM_FLY_IMAGE"),
    Var::text("EXECSEAM_FLY_REGION"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Fly {
        about: "Fly Machines through the Machines API exec endpoint (machines of one app are the sandboxes)",
        config: FlyConfig,
        provider: FlyProvider,
    }

    fn capabilities(config: &FlyConfig) -> Capabilities {
        FlyExec::capabilities_of(config)
    }
}

/// The largest command (argv and env) sent, checked before any I/O: the machine `execve`s the
/// exec request's argv (128 KiB per string, 2 MiB less 256 KiB in all, the rest of `ARG_MAX` left to the
/// machine's environment); a command with env, a workdir or binary stdin is one `/bin/sh -c`
/// script in it. The check is on the argv as sent, wrapper and quoting included
/// (`size::check_wire`); the raw command's size is only its fast lower bound. The rule until
/// the machine is asked: the first command over 64 KiB asks its own `ARG_MAX` (`size::ArgMax`,
/// one probe per handle, through its exec), which then is the limit.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the Fly machine: 128 KiB per string after wrapping and quoting, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

/// The provider name in errors and capabilities.
pub const PROVIDER: &str = "fly";
