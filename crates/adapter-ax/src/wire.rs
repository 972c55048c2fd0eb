//! The wire format: prost messages and tonic stubs generated from the published proto
//! (`execseam-ax-proto`, names exactly as the proto spells them).
//!
//! The proto is the version google/ax pins ("variant B"); see the crate docs for why the older
//! variant (StreamProcessOutputs, KillProcess) is not offered.

pub use ateenv::v1alpha::*;
pub use execseam_ax_proto::{ateenv, google};

/// The gRPC metadata key the Substrate router routes on: `<atespace>/<actor>`.
pub const TARGET_ACTOR_HEADER: &str = "ate-target-actor";
