#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod adapter;
#[cfg(feature = "spool")]
pub mod attached;
#[cfg(feature = "body")]
pub mod body;
pub mod checks;
pub mod deadline;
mod debug_fields;
pub mod degrade;
mod entry_setters;
pub mod excerpt;
pub mod exec_by;
mod forward;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod guard;
mod handle;
pub mod host_snapshots;
#[cfg(feature = "http")]
pub mod http;
pub mod id;
pub mod json;
mod processes;
mod provider_config;
pub mod reaper;
#[cfg(feature = "spool")]
pub mod registry;
pub mod retry;
pub mod secret_env;
mod setters;
pub mod size;
#[cfg(feature = "spool")]
pub mod spool;
mod state;
pub mod text;
pub mod trace;
#[cfg(feature = "url")]
pub mod url_path;
pub mod vars;
#[cfg(feature = "websocket")]
pub mod ws;

pub use adapter::Adapter;
pub use checks::{Checks, StateChecks};
pub use state::declared_port;

/// What the kit's macros name (not part of its API).
#[doc(hidden)]
pub mod __private {
    pub use execseam_core::{Capabilities, Command, Error, LifecycleCapabilities};
    pub use tracing;
}
pub use vars::{Var, VarKind, Vars};

use execseam_core::{Error, ErrorKind};

/// A destroy that found the sandbox already gone counts as done: maps `Err(NotFound)` to
/// `Ok(())`, for [`Provider::destroy`](execseam_core::Provider::destroy) implementations
/// (`Sandbox::destroy` does it already).
pub fn gone_is_destroyed(result: Result<(), Error>) -> Result<(), Error> {
    match result {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
