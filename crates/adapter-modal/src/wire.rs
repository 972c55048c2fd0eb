//! The wire format: prost messages and tonic stubs generated at build time from the descriptors
//! of the pinned `modal==1.6.4` wheel (`proto/modal-1.6.4.binpb`, names exactly as Modal's
//! schema spells them). Only the RPCs listed in `proto/export.py` and the messages they reach are
//! generated; every kept message is whole.

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
