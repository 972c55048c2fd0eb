#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Chrono Sandbox's contract, in one place: the wire ([`wire`]: bodies, statuses, error codes,
//! the idempotency-key rule, ETags, timestamps), the durable `/executions` rules as a server keeps
//! them ([`contract`]: the operation record, its transitions, the reply of each route), and how a
//! run's end becomes each answer ([`run`]). The adapter (`execseam-chrono`), the emulator
//! (`execseam-emulator-chrono`) and `execseam serve` (`execseam-server`) all use it, so the three
//! cannot drift apart. (Chrono has no official client to keep an emulator honest: the contract is
//! reconstructed from its clients' sources, seed 004.)
#![warn(missing_docs)]

pub mod contract;
pub mod run;
pub mod wire;

pub use run::RunEnd;
