#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Utilities for execseam's own tests (this crate is not published): a tracing subscriber that
//! captures every record ([`capture`]), `execseam` daemons (`emulate`, `chaos`: [`daemon`]), the providers' official SDKs installed under the target
//! directory ([`interop`]), the services tests start themselves (a container engine and
//! PostgreSQL: [`fixtures`]), and probes of the host's processes ([`probe`]).
#![warn(missing_docs)]

pub mod capture;
pub mod daemon;
pub mod fixtures;
pub mod interop;
pub mod probe;
