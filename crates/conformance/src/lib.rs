#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! The behaviour suite every execseam adapter must pass.
//!
//! The suite is a list of [`Case`]s: plain async functions over a [`Target`] (a `&dyn Exec`, its
//! [`Capabilities`](execseam_core::Capabilities), a scratch directory in the sandbox, and, for
//! emulated runs, a fault injector). A case passes, fails with a diff, or is not applicable with the
//! capability or target property that rules it out; nothing is skipped silently.
//!
//! The runner prints one line per case and ends with `N passed, M failed, K not applicable`, writes
//! a JSON report to `target/conformance/<adapter>.json`, and compares the outcome of each case with
//! the record in `docs/conformance/<adapter>.txt` (rewritten when `EXECSEAM_CONFORMANCE_BLESS=1`,
//! which `cargo xtask conformance --adapter all` sets).
//!
//! Snapshots are named explicitly and live in this crate's `snapshots/` directory, so every adapter
//! is compared against the same files: every backend must produce the same bytes.
//!
//! Environment: `EXECSEAM_PROPTEST_CASES` (cases per property, default from the target, 32 unless
//! set), `EXECSEAM_PROPTEST_SEED` (a seed; the default is a fixed one so runs are repeatable).
#![warn(missing_docs)]

pub mod faults;

pub use faults::{FAULT_NAMES, Fault, Faults, cannot_inject};

// The suite proper (feature `suite`, on by default). Without it the crate is the fault
// vocabulary only, which the emulators implement.
#[cfg(feature = "suite")]
pub mod cases;
#[cfg(feature = "suite")]
pub mod hostile;
#[cfg(feature = "suite")]
pub mod http;
#[cfg(feature = "suite")]
mod property;
#[cfg(feature = "suite")]
mod report;
#[cfg(feature = "suite")]
mod snapshot;
#[cfg(feature = "suite")]
mod target;

/// The standard test harness the runner is built on, for [`run_with_args`].
#[cfg(feature = "suite")]
pub use libtest_mimic;
#[cfg(feature = "suite")]
pub use report::{CaseReport, Report, RunSummary, main, run, run_cases, run_with_args};
#[cfg(feature = "suite")]
pub use target::{Case, CaseResult, Outcome, Target, block_on};
