#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Utilities for execseam's own tests (this crate is not published): a tracing subscriber that
//! captures every record ([`capture`]), `execseam` daemons (`emulate`, `chaos`: [`daemon`]), the providers' official SDKs installed under the target
//! directory ([`interop`]), the services tests start themselves (a container engine and
//! PostgreSQL: [`fixtures`]), probes of the host's processes ([`probe`]), the planted secrets of
//! the adapters' log tests ([`secrets`]), process-handle checks any adapter passes
//! ([`processes`]), one-command exec checks ([`exec`]) and what the adapters' benches share ([`bench`]).
#![warn(missing_docs)]

pub mod bench;
pub mod capture;
pub mod daemon;
pub mod exec;
pub mod fixtures;
pub mod interop;
pub mod probe;
pub mod processes;
pub mod secrets;
