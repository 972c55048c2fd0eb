#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Prost messages and tonic stubs generated at build time (protox, no system `protoc`) from
//! `proto/ateenv/v1alpha/guest.proto`, names exactly as the proto spells them: the client stubs
//! always, the server stubs with feature `server`. Shared by the adapter (`execseam-ax`) and the
//! emulator (`execseam-emulator-ax`): generated code only, nothing hand-written.
#![warn(missing_docs)]

/// `google.protobuf` well-known types used by the guest proto (Timestamp, Duration).
#[allow(missing_docs, unused_qualifications, clippy::all, clippy::pedantic)]
pub mod google {
    /// `google.protobuf`.
    pub mod protobuf {
        tonic::include_proto!("google.protobuf");
    }
}

/// The `ateenv` packages.
#[allow(missing_docs, unused_qualifications, clippy::all, clippy::pedantic)]
pub mod ateenv {
    /// `ateenv.v1alpha`: messages, `process_service_client`, `file_system_service_client` (and the
    /// `*_server` modules with feature `server`).
    pub mod v1alpha {
        tonic::include_proto!("ateenv.v1alpha");
    }
}

pub use ateenv::v1alpha::*;
