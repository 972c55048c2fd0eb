#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! execseam adapter for Chrono Sandbox (seed 004: Aevatar's `code_execute`): runs each
//! [`Command`](execseam_core::Command) as a `bash` program through the synchronous
//! `POST /execute`, or through the durable `/executions` contract
//! ([`ChronoConfig::durable`]); and a typed [`DurableClient`] for `/executions`, usable on its
//! own, whose reconcile loop follows Aevatar's rules.
//!
//! # Capabilities ([`CAPABILITIES`])
//!
//! | field | value | how |
//! |---|---|---|
//! | argv | shell-wrapped | the program is `bash`: `exec` + argv quoted exactly ([`execseam_adapter_kit::degrade::join`]) |
//! | stdin | temp file | the bytes go in `input_files` (base64) under a fresh relative name; the program opens it as stdin and removes it; without stdin, stdin is `/dev/null` |
//! | workdir | shell-wrapped | `cd --` in the degrade wrapper; a missing workdir is `Err(NotFound)` |
//! | env | shell-wrapped | `env --` in the wrapper (Ornn's `env` field is not used: it cannot carry every key, and the server owns some) |
//! | streaming | no | |
//! | remote_kill | durable only | a dropped exec sends `POST /executions/{id}/cancel`; `/execute` has no cancel |
//! | binary_output | no | stdout and stderr are JSON strings |
//! | native_tools | `code` | the `code` tool's commands ([`execseam_core::code`]) are sent in their own language |
//! | processes | native | the durable `/executions` ([`process`]): keyed idempotent start, output and exit in the result (framed for exact bytes), `KILL` as a cancel; no stdin after the start, other signals, list or terminals |
//!
//! # Rules kept
//!
//! - A `success:false` answer on HTTP 200 with an `output` (`EXECUTION_FAILED`) is a **result**:
//!   `Ok` with the exit code. `success:true` with a non-zero exit, or a missing exit code, is
//!   `Err(Protocol)` ([`wire::parse_completion`]).
//! - `/execute` is never re-sent; every failure after it may have run is `Retry::Unsafe`.
//! - `timeout_secs` (1..=600, default 180) is checked before any I/O.
//! - The NyxID proxy envelope `{"error": true, "status", "body"}` is looked into for the code.
//! - Tokens are `secrecy` types and never reach `Debug`, errors or traces.
//!
//! Error mapping: `docs/adapters/chrono.md`.
#![warn(missing_docs)]

mod config;
// The contract (the wire and the durable rules) is its own crate, shared with the emulator and
// `execseam serve`.
use execseam_chrono_contract::wire;
pub mod durable;
mod error;
mod exec;
pub mod http;
pub mod process;
mod provider;
#[cfg(test)]
mod script;

pub use config::{ChronoConfig, DurablePolicy};
pub use durable::{DurableClient, Operation, Terminal};
pub use exec::{ChronoExec, Executed, Prepared};
pub use process::{ChronoProcesses, PROCESS_CAPABILITIES};
pub use provider::ChronoProvider;

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, Delivery, LifecycleCapabilities, Tool};

/// The largest command (argv and env) sent, checked before any I/O: the command reaches the
/// sandbox as one `bash -c` script, a single `execve` string of at most 128 KiB
/// (`MAX_ARG_STRLEN`). The check is on that script as sent, wrapper and quoting included
/// (`size::check_wire`); the raw command's size is only its fast lower bound.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::script(
        execseam_adapter_kit::size::MAX_ARG_STRLEN - 1,
        "one bash -c script in the Chrono sandbox: 128 KiB after wrapping and quoting",
    );

/// The provider name in errors and capabilities.
pub const PROVIDER: &str = "chrono";

/// The configuration variables [`ChronoConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::url("CHRONO_BASE_URL").required(),
    Var::secret("CHRONO_TOKEN"),
    Var::secret("CHRONO_DELEGATION_TOKEN"),
    Var::text("CHRONO_VIA"),
    Var::seconds("CHRONO_TIMEOUT_SECS"),
    Var::flag("CHRONO_DURABLE"),
    Var::text("CHRONO_STATE_DIR"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Chrono {
        about: "Chrono Sandbox through POST /execute (CHRONO_DURABLE=1: the durable /executions contract)",
        config: ChronoConfig,
        provider: ChronoProvider,
    }

    const LOST_CREATE: execseam_adapter_kit::guard::LostCreate = execseam_adapter_kit::guard::LostCreate::NothingMade(
        "Chrono's create sends no request: every execution runs in a fresh sandbox removed when it ends",
    );

    fn capabilities(config: &ChronoConfig) -> Capabilities {
        ChronoExec::capabilities_of(config)
    }
}

/// Chrono has no sandbox that outlives one execution: [`ChronoProvider::create`] returns a handle
/// on the service (no call is made, no spec field applies); there is nothing to connect to, list
/// or destroy.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    create: true,
    ..LifecycleCapabilities::NONE
};

/// The capabilities with the default (synchronous) configuration; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    argv: Delivery::ShellWrapped,
    stdin: Delivery::TempFile,
    workdir: Delivery::ShellWrapped,
    env: Delivery::ShellWrapped,
    streaming: false,
    remote_kill: false,
    binary_output: false,
    max_stdin: Some(8 << 20),
    max_output: None,
    native_tools: &[Tool::CODE],
    processes: Some(PROCESS_CAPABILITIES),
};
