#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! What every provider emulator shares: the loopback [`Server`], deterministic [`faults`], and the
//! [`Sandbox`] that really runs commands.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`; both error
// types are large by nature.
#![allow(clippy::result_large_err)]

pub mod clock;
pub mod faults;
pub mod grpc;
pub mod ports;
pub mod sandbox;
pub mod server;
pub mod sh;
pub mod shell;
pub mod stream;
#[doc(hidden)]
pub mod sys;
pub mod util;
pub mod ws;

pub use faults::{
    FAULT_NAMES, FAULTS_BUT_VANISH, Fault, FaultHandle, FaultRule, Faults, Rendered, When,
    check_rule,
};
pub use sandbox::{
    Dir, DirImage, Fs, Isolation, Mount, PtyChild, PtyMaster, PtySize, Sandbox, SandboxChild,
    SandboxSpec, Sandboxing, Snapshot, User,
};
pub use server::{
    BodyLimit, ConnControl, Server, reset_connection, serve_stream, stream_then_drain,
};
pub use shell::{
    AnyEmulator, Emulator, EmulatorOptions, Entry, Provider, RecordedRequest, RequestLog,
    SandboxEntry, Sandboxes, Shell, Token, Unregistered, bearer,
};

/// The header a proxy in front of an emulator sets to the address its client reached (the
/// chaos proxy sets it): emulators that hand out URLs of their own (Daytona's toolbox, Modal's
/// task router) answer with that address, so the client's next calls go through the proxy too.
pub const FORWARDED_HOST: &str = "x-forwarded-host";
