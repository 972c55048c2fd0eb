//! execseam adapter for Modal Sandboxes.
#![warn(missing_docs)]

pub mod wire;
