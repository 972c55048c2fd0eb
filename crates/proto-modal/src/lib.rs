#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Prost messages and tonic stubs generated at build time from `proto/modal-1.6.4.binpb`, the
//! `FileDescriptorSet` that `proto/export.py` exports from the pinned `modal` wheel (no protoc,
//! no `.proto` parsing): the client stubs always, the server stubs with feature `server`. Shared
//! by the adapter (`execseam-modal`) and the emulator (`execseam-emulator-modal`): generated
//! code only, nothing hand-written.
#![warn(missing_docs)]

/// `google.protobuf` well-known types the schema uses (Any, Empty).
#[allow(missing_docs, unused_qualifications, clippy::all, clippy::pedantic)]
pub mod google {
    /// `google.protobuf`.
    pub mod protobuf {
        tonic::include_proto!("google.protobuf");
    }
}

/// The `modal` packages.
#[allow(missing_docs, unused_qualifications, clippy::all, clippy::pedantic)]
pub mod modal {
    /// `modal.client`: the control plane (`modal_client_client::ModalClientClient`).
    pub mod client {
        tonic::include_proto!("modal.client");
    }
    /// `modal.task_command_router`: the per-task exec service.
    pub mod task_command_router {
        tonic::include_proto!("modal.task_command_router");
    }
}

pub use modal::client as api;
pub use modal::task_command_router as tcr;
