#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! The execseam contract: one small, strict seam between an agent host and a sandbox.
//!
//! An agent host runs its builtin tools (bash, read, write, glob, grep, apply_patch) by handing a
//! [`Command`] to an [`Exec`] and getting back an [`Output`] or an [`Error`]:
//!
//! ```
//! use execseam_core::{Command, Exit, Tool};
//!
//! let cmd = Command::builder(["sh", "-c", "printf o; printf e >&2; exit 3"])
//!     .tool(Tool::BASH)
//!     .workdir("/tmp")
//!     .env("LANG", "C.UTF-8")
//!     .build()
//!     .expect("a valid command");
//! assert_eq!(cmd.argv()[0], "sh");
//! // let out = exec.exec(cmd).await?;  // Ok(Output { stdout: "o", stderr: "e", exit: Exit::Code(3) })
//! # let _ = Exit::Code(3);
//! ```
//!
//! # The rules every adapter is held to
//!
//! 1. A non-zero exit is a **result** ([`Output`]), never an error. An infrastructure failure is the
//!    [`Error`], typed by [`ErrorKind`], with a [`Retry`] class.
//! 2. stdout and stderr are separate. Merging them is never an acceptable adapter shortcut.
//! 3. Exit 137/143 (or SIGKILL/SIGTERM) is ambiguous by construction: the command's own OOM or a
//!    host envelope. [`Exit::is_ambiguous_kill`] says so; only the host that set the envelope may
//!    classify it. When the host's own deadline fires, the result is an `Err` of kind
//!    [`ErrorKind::Timeout`] carrying the partial output, not an `Output`.
//! 4. argv is never reinterpreted. Where a backend only takes a string, the adapter quotes exactly
//!    (the adapter kit's `degrade::quote` / `degrade::join`).
//! 5. Listings are ordered and truncated by the library, never by the sandbox (see `execseam-tools`).
//! 6. No policy, limits or budget inside [`Command`]: policy lives on the host side, in adapter
//!    configuration and in host-side layers (`execseam-layers`).
//!
//! The conformance suite (`execseam-conformance`) enforces each rule against every adapter.
#![warn(missing_docs)]

#[macro_use]
mod macros;

mod capabilities;
mod command;
mod error;
mod exec;
mod lifecycle;
mod output;
pub mod process;
mod state;
pub mod wire;

pub use capabilities::{Capabilities, Delivery};
pub use command::{Command, CommandBuilder, Tool};
pub use error::{Deadline, Error, ErrorKind, Retry, WireStatus};
pub use exec::{BoxFuture, Event, EventStream, Exec, ExecStream};
pub use lifecycle::{
    LifecycleCapabilities, ListFilter, Ownership, Provider, Sandbox, SandboxInfo, SandboxSpec,
    SandboxState, SpecSupport,
};
pub use output::{Exit, ExitClass, Output, PartialOutput, Truncated};
pub use process::{
    Mechanism, ProcessCapabilities, ProcessEvent, ProcessHandle, ProcessInfo, ProcessRead,
    ProcessState, ProcessStream, Processes, Signal, StartKey, StartRequest, Started, StdinMode,
    StdinState, StdinWrite, StreamOffsets, TerminalSize, Waited,
};
pub use state::{
    ExposeSupport, ExposedPort, ForkSupport, Kept, PauseSupport, PortAuth, PortsWhen, Scope,
    Secret, SnapshotInfo, SnapshotOutcome, SnapshotRequest, SnapshotSupport, SourceAfter,
    StateCapabilities, WhilePaused,
};
