//! What every provider emulator shares: the loopback [`Server`], deterministic [`faults`], and the
//! [`Sandbox`] that really runs commands.

pub mod clock;
pub mod faults;
#[cfg(any(feature = "ax", feature = "modal"))]
pub mod grpc;
pub mod sandbox;
pub mod server;
pub(crate) mod sys;

pub use faults::{
    FAULT_NAMES, Fault, FaultHandle, FaultRule, Rendered, When, arm_checked, check_rules,
};
pub use sandbox::{
    Dir, Fs, Isolation, Mount, PtyChild, PtyMaster, PtySize, Sandbox, SandboxChild, SandboxSpec,
    Sandboxing, User,
};
pub use server::{ConnControl, Server, reset_connection};
