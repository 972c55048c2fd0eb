//! The wire format: prost messages and tonic stubs generated (in `execseam-modal-proto`) from the descriptors
//! of the pinned `modal==1.6.4` wheel (`proto/modal-1.6.4.binpb`, names exactly as Modal's
//! schema spells them). Only the RPCs listed in `proto/export.py` and the messages they reach are
//! generated; every kept message is whole.

pub use execseam_modal_proto::modal;
pub use modal::client as api;
pub use modal::task_command_router as tcr;
