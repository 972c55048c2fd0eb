#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! execseam adapter for the **agent-substrate guest services** (`ateenv.v1alpha`, gRPC over
//! h2c), the API google/ax serves inside a task when `TaskSpec.debug` is true (`ax ssh` uses it).
//!
//! `StartProcessRequest{command, cwd, env, stdin}` is execseam's `Command{argv, workdir, env,
//! stdin}` field for field, and output is addressed by byte offsets, so a dropped connection is
//! resumed instead of guessed at. Unlike AX's own client (which turns every infrastructure error
//! into exit code 1), a process that cannot be observed is an `Err`, never an exit code.
//!
//! # Capabilities ([`CAPABILITIES`])
//!
//! | | |
//! |---|---|
//! | argv | native (`command`, executed without a shell) |
//! | stdin | native (`stdin: true` + `WriteProcessInput`, then `close`) |
//! | workdir | native (`cwd`) |
//! | env | native (`env`, layered on the guest's environment) |
//! | streaming | yes (`StreamProcessOutput{follow}`) |
//! | remote kill | yes (`SignalProcess{SIGNAL_KILL}` to the process group when an exec is dropped) |
//! | binary output | yes (`bytes` fields) |
//! | max output | 10 MiB per stream (the guest's spool limit; beyond it: `Err(OutputLimit)`) |
//! | process handles | native: the guest's processes, found by key through the kit's registry in the guest (`process` module; `docs/adapters/ax.md`, "Process handles") |
//!
//! # Version
//!
//! This crate speaks the proto version google/ax pins (agent-substrate/env 4468a200: `Process`
//! with `state`, `StreamProcessOutput` ending in an `exit` message, `WriteProcessInput`,
//! `SignalProcess`, `WriteFileRequest{path, mode, seek_offset, chunk}`). The older published
//! variant (`StreamProcessOutputs` without exit, `GetProcess` with `status`, `KillProcess`, no
//! stdin, `WriteFileRequest{path, chunk, mode, append}`) is **not** offered: its `Process` and
//! `WriteFileRequest` reuse field numbers with other wire types, so one client cannot serve both,
//! and it lacks stdin. A guest of that version is detected (its `StartProcess` answer has no
//! state) and reported as `Unsupported`.
//!
//! # Quirks
//!
//! - A program that cannot be started is the guest's INTERNAL `starting process: …`, not a
//!   process: it maps to `Err(NotFound)` (missing program or missing workdir: Go reports both as
//!   ENOENT) with `Retry::Never`.
//! - Exit codes are the guest's: a signalled process is `Exit::Code(128 + n)`.
//! - The guest sends each spool delta as one message (up to 10 MiB): the receive limit is 16 MiB.
//! - There is no listing RPC: glob and list run as commands (the library sorts). Files are read
//!   and written with [`AxExec::read_file`] / [`AxExec::write_file`].
//!
//! Errors: the gRPC status → `ErrorKind` + `Retry` table is in `docs/adapters/ax.md` ("Errors").
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod exec;
mod process;
mod wire;

mod provider;

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, LifecycleCapabilities};

use crate::config::GUEST_MAX_LOG_BYTES;

/// The largest command (argv and env) sent, checked before any I/O: the guest `execve`s it
/// (128 KiB per string, 2 MiB less 256 KiB in all, the rest of `ARG_MAX` left to the guest's environment).
/// The fallback: the first command over 64 KiB asks the guest (`size::ArgMax`: its `getconf
/// ARG_MAX` less its environment) and is checked against that.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the AX guest: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

pub use config::{AX_PORT, AxConfig, ENV_LIBRARY_PORT, ENV_TARGET_ACTOR};
/// The provider name in errors and reports.
pub const PROVIDER: &str = "ax";
pub use exec::{AxExec, DETACH, detached};
pub use provider::AxProvider;

/// The marker the guest appends once when a spool reaches its limit.
pub const TRUNCATION_MARKER: &[u8] = b"\n\n[guest: maximum log limit of ";

/// The capabilities with the default configuration.
pub const CAPABILITIES: Capabilities = Capabilities {
    max_output: Some(GUEST_MAX_LOG_BYTES),
    processes: Some(process::PROCESSES),
    ..Capabilities::FULL
};

/// AX's lifecycle: connect only. A guest belongs to a task declared elsewhere (the AX API or
/// `ax run`); execseam neither creates, lists nor ends it.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    connect: true,
    ..LifecycleCapabilities::NONE
};

/// The configuration variables [`AxConfig::from_env`] reads.
pub const VARS: &[Var] = &[Var::text("AX_TARGET_ACTOR")];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Ax {
        about: "agent-substrate guest services as google/ax serves them (connect only: the guest's host:port is the sandbox id)",
        config: AxConfig,
        provider: AxProvider,
    }

    const LOST_CREATE: execseam_adapter_kit::guard::LostCreate = execseam_adapter_kit::guard::LostCreate::NothingMade("AX has no create: it connects to a running guest");
}
