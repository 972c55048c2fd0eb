//! The wire format: prost messages and tonic stubs generated from the published proto
//! (`execseam-ax-proto`, names exactly as the proto spells them).
//!
//! The proto is the version google/ax pins ("variant B"); see the crate docs for why the older
//! variant (StreamProcessOutputs, KillProcess) is not offered.

pub use ateenv::v1alpha::*;
pub use execseam_ax_proto::{ateenv, google};

/// The gRPC metadata key the Substrate router routes on: `<atespace>/<actor>`.
pub const TARGET_ACTOR_HEADER: &str = "ate-target-actor";

/// Full method paths, as they appear on the wire (`:path`).
pub mod paths {
    /// `StartProcess`.
    pub const START_PROCESS: &str = "/ateenv.v1alpha.ProcessService/StartProcess";
    /// `GetProcess`.
    pub const GET_PROCESS: &str = "/ateenv.v1alpha.ProcessService/GetProcess";
    /// `StreamProcessOutput` (server streaming).
    pub const STREAM_PROCESS_OUTPUT: &str = "/ateenv.v1alpha.ProcessService/StreamProcessOutput";
    /// `WriteProcessInput` (client streaming).
    pub const WRITE_PROCESS_INPUT: &str = "/ateenv.v1alpha.ProcessService/WriteProcessInput";
    /// `SignalProcess`.
    pub const SIGNAL_PROCESS: &str = "/ateenv.v1alpha.ProcessService/SignalProcess";
    /// `ReadFile` (server streaming).
    pub const READ_FILE: &str = "/ateenv.v1alpha.FileSystemService/ReadFile";
    /// `WriteFile` (client streaming).
    pub const WRITE_FILE: &str = "/ateenv.v1alpha.FileSystemService/WriteFile";
}
