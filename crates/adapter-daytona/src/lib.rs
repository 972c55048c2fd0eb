//! execseam adapter for [Daytona](https://www.daytona.io) sandboxes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), execseam_core::Error> {
//! use execseam_core::{Command, Exec};
//! use execseam_daytona::{DaytonaConfig, DaytonaExec};
//!
//! let exec = DaytonaExec::connect(DaytonaConfig::from_env()?).await?;
//! let out = exec.exec(Command::new(["sh", "-c", "printf o; printf e >&2; exit 3"])?).await?;
//! assert_eq!((&out.stdout[..], &out.stderr[..]), (&b"o"[..], &b"e"[..]));
//! # Ok(()) }
//! ```
//!
//! # How a command runs
//!
//! Never through `POST /process/execute`: that route merges stdout and stderr into one string.
//! Each command gets its own **session** (`POST /process/session`), runs there
//! (`POST /process/session/{id}/exec`), and the session is deleted afterwards; deleting it is also
//! how an abandoned command is killed. The daemon labels session output line by line (a `\n` is
//! added to a last line without one, NUL bytes are lost), so the command runs under a small framing
//! script that base64-encodes each stream into lines and appends trailers; the adapter decodes the
//! exact bytes and checks the trailer's status against Daytona's `exitCode`. See [`exec`](crate::exec)
//! for the details.
//!
//! We announce `X-Daytona-SDK-Version: 0.226.1`, which makes the daemon split `stdout` and
//! `stderr` in its answers; the raw `output` with `\x01\x01\x01` / `\x02\x02\x02` line prefixes
//! (what older daemons send) is demultiplexed too.
//!
//! # Capabilities and degradations ([`CAPABILITIES`])
//!
//! | part | delivery |
//! |---|---|
//! | argv | shell-wrapped: quoted exactly with `execseam_core::degrade` (the session runs a shell) |
//! | workdir, env | shell-wrapped by the core's wrapper (`cd`, `env --`); a missing workdir is `Err(NotFound)` |
//! | stdin | a temp file uploaded with the files API (`POST /files/bulk-upload`), then redirected; the session input route takes text only |
//! | stdout/stderr | separate and byte-exact (binary included) |
//! | streaming | yes: the `logs?follow=true` WebSocket |
//! | remote kill | yes: dropping the exec deletes the session, which kills its process tree |
//! | native tools | none: `find_files` is a literal search that skips binary files and `search_files` matches directories and returns paths as JSON strings, so neither gives the bytes `grep`/`find` would ([`DaytonaExec::find_in_files`] and [`DaytonaExec::search_files`] are available as such) |
//!
//! Errors: the `{statusCode, message, code, source}` envelope maps to [`ErrorKind`](execseam_core::ErrorKind)
//! by status (404 `NotFound`, 401 `Unauthenticated`, 429 `RateLimited` with `Retry-After`, 408
//! `Timeout`, 410 `SESSION_ENDED` `Unavailable`, 5xx `Internal`/`Unavailable`), and from the
//! request that runs the command on, every failure that may follow a run is `Retry::Unsafe`. That
//! request has no timeout and is never re-sent (reqwest's retries are off).
#![warn(missing_docs)]

mod client;
pub mod config;
pub mod error;
pub mod exec;
pub mod wire;

pub use config::{DaytonaConfig, SandboxChoice};
pub use exec::{CAPABILITIES, DaytonaExec};
