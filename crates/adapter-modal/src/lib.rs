//! execseam adapter for **Modal Sandboxes**, over gRPC as the official `modal==1.6.4` client
//! speaks it: the control plane (`modal.client.ModalClient`) for the sandbox lifecycle and the
//! task command router (`modal.task_command_router.TaskCommandRouter`) for commands.
//!
//! Modal's exec is argv-native (`TaskExecStartRequest{command_args, workdir}`), output is
//! addressed by byte offsets (a dropped stream is reopened where it stopped), and the exit is a
//! code or a signal. See `docs/adapters/modal.md` for the capability table, the error mapping,
//! what was verified and what was not.
#![warn(missing_docs)]

mod client;
pub mod config;
pub mod error;
mod exec;
pub mod wire;

pub use config::{ENV, ModalConfig};
pub use exec::{CAPABILITIES, ModalExec, SandboxSummary, is_v1_sandbox_id};
