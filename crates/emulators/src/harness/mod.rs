//! What every provider emulator shares: the loopback [`Server`], deterministic [`faults`], and the
//! [`Sandbox`] that really runs commands.

pub mod clock;
pub mod faults;
pub mod sandbox;
pub mod server;

pub use faults::{Fault, FaultHandle, FaultRule, When};
pub use sandbox::{Isolation, Sandbox, SandboxSpec};
pub use server::{ConnControl, Server, reset_connection};
