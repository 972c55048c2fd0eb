//! execseam adapter for Chrono Sandbox (seed 004: Aevatar's `code_execute`): runs each
//! [`Command`](execseam_core::Command) as a `bash` program through the synchronous
//! `POST /execute`, or through the durable `/executions` contract
//! ([`ChronoConfig::durable`]); and a typed [`DurableClient`] for `/executions`, usable on its
//! own, whose reconcile loop follows Aevatar's rules.
//!
//! ```no_run
//! # async fn demo() -> Result<(), execseam_core::Error> {
//! use execseam_core::{Command, Exec};
//! use execseam_chrono::{ChronoConfig, ChronoExec};
//!
//! let chrono = ChronoExec::new(ChronoConfig::new("http://127.0.0.1:8080").timeout_secs(60))?;
//! let out = chrono.exec(Command::new(["uname", "-a"])?).await?;
//! println!("{:?}: {}", out.exit, String::from_utf8_lossy(&out.stdout));
//! # Ok(()) }
//! ```
//!
//! # Capabilities ([`CAPABILITIES`])
//!
//! | field | value | how |
//! |---|---|---|
//! | argv | shell-wrapped | the program is `bash`: `exec` + argv quoted exactly ([`execseam_core::degrade::join`]) |
//! | stdin | temp file | the bytes go in `input_files` (base64) under a fresh relative name; the program opens it as stdin and removes it; without stdin, stdin is `/dev/null` |
//! | workdir | shell-wrapped | `cd --` in the degrade wrapper; a missing workdir is `Err(NotFound)` |
//! | env | shell-wrapped | `env --` in the wrapper (Ornn's `env` field is not used: it cannot carry every key, and the server owns some) |
//! | streaming | no | |
//! | remote_kill | durable only | a dropped exec sends `POST /executions/{id}/cancel`; `/execute` has no cancel |
//! | binary_output | no | stdout and stderr are JSON strings |
//! | native_tools | `code` | the `code` tool's commands ([`execseam_core::code`]) are sent in their own language |
//!
//! # Rules kept
//!
//! - A `success:false` answer on HTTP 200 with an `output` (`EXECUTION_FAILED`) is a **result**:
//!   `Ok` with the exit code. `success:true` with a non-zero exit, or a missing exit code, is
//!   `Err(Protocol)` ([`wire::parse_completion`]).
//! - `/execute` is never re-sent; every failure after it may have run is `Retry::Unsafe`.
//! - `timeout_secs` (1..=600, default 180) is checked before any I/O.
//! - The NyxID proxy envelope `{"error": true, "status", "body"}` is looked into for the code.
//! - Tokens are `secrecy` types and never reach `Debug`, errors or traces.
//!
//! Error mapping: `docs/adapters/chrono.md`.
#![warn(missing_docs)]

mod config;
pub mod durable;
mod error;
mod exec;
pub mod http;
pub mod wire;

pub use config::{ChronoConfig, DurablePolicy};
pub use durable::{DurableClient, Operation, Terminal};
pub use error::{Op, from_status};
pub use exec::{CAPABILITIES, ChronoExec, Prepared};

/// The provider name in errors and capabilities.
pub const PROVIDER: &str = "chrono";
