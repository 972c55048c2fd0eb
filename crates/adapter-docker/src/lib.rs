//! execseam adapter for containers over the [Docker Engine API]: Docker Engine, or podman's
//! Docker-compatible service (`podman system service`), through [bollard] on `DOCKER_HOST`. No
//! CLI is run.
//!
//! Two modes:
//!
//! - **Warm** ([`DockerExec::create`], [`DockerExec::connect`]): one long-lived container (its
//!   keepalive under an init, labelled, with the limits given); every command is a Docker exec in
//!   it, so files and processes persist between commands. [`DockerExec::destroy`] removes it.
//! - **Per call** ([`DockerExec::per_call`]): every command gets a fresh container (the same
//!   settings, plus the worktree bind-mounted at `/workspace`, the default workdir), which is
//!   removed before the command's result is returned. Only the worktree survives between
//!   commands.
//!
//! ```no_run
//! # async fn demo() -> Result<(), execseam_core::Error> {
//! use execseam_core::{Command, Exec};
//! use execseam_docker::{DockerConfig, DockerExec};
//!
//! let config = DockerConfig::new("python:3.12-slim").memory(512 << 20);
//! let sandbox = DockerExec::create(config).await?;
//! let out = sandbox.exec(Command::new(["python3", "-c", "print(6 * 7)"])?).await?;
//! println!("{:?}: {}", out.exit, String::from_utf8_lossy(&out.stdout));
//! sandbox.destroy().await?;
//! # Ok(()) }
//! ```
//!
//! # Capabilities ([`CAPABILITIES`])
//!
//! | field | value | how |
//! |---|---|---|
//! | argv | native | the exec's `Cmd` array |
//! | stdin | temp file | attached and half-closed, but first stored by `sh`/`cat` in a 0600 file under [`DockerConfig::temp_dir`] that becomes the command's stdin and is removed before it starts (podman loses output when an exec exits with attached stdin unread); empty stdin is not attached (`/dev/null`) |
//! | workdir | native | the exec's `WorkingDir`; a missing one is `Err(NotFound)` (see below) |
//! | env | native | the exec's `Env`, over the container's |
//! | streaming | yes | the exec's multiplexed stdout/stderr frames as they arrive |
//! | remote_kill | yes | warm: every process carrying the exec's [`EXEC_TAG_VAR`] is SIGKILLed by a kill exec; per call: the container is removed |
//! | binary_output | yes | frames carry raw bytes |
//!
//! # What the engine gets wrong, and what the adapter does
//!
//! - **Exit codes come from exec inspect**, after the output ends (polled while the exec still
//!   runs), never from a container's wait status: through podman's compat socket `docker run
//!   --rm` reports 0 for a command that exited 3, and an init rewrites a missing program to 1.
//! - **125/126/127 are results.** A command that exits with them is `Ok`; the engine's own
//!   failures (image missing, container cannot start, container gone) are typed errors from the
//!   API's answer, never exit codes. A missing program is 127 with the runtime's message, as in a
//!   shell. A missing workdir is also 126/127 from the runtime: the adapter then stats the
//!   workdir through the archive API and reports `Err(NotFound)` if it is not a directory.
//! - **A stopped or removed container is an error**, not the 137 the exec reports: on 137/143
//!   the adapter inspects the container.
//! - **podman writes its own errors into the stderr frame** (`Error: …`, libpod
//!   `hijackWriteError`); the adapter reports stderr as received.
//! - **podman's transient `stopped` state** is not in Docker's schema; the adapter reads it as
//!   "not running".
//!
//! Error mapping and the lifecycle: see `docs/adapters/docker.md`.
//!
//! [Docker Engine API]: https://docs.docker.com/reference/api/engine/
//! [bollard]: https://docs.rs/bollard
#![warn(missing_docs)]

mod client;
pub mod config;
mod error;
mod exec;
mod sandbox;

pub use client::{LABEL_MANAGED, LABEL_MODE};
pub use config::{DockerConfig, Mode, Ulimit};
pub use exec::{CAPABILITIES, DockerExec, DockerOutput, EXEC_TAG_VAR};
pub use sandbox::ContainerInfo;

/// The provider name in errors and capabilities.
pub const PROVIDER: &str = "docker";
