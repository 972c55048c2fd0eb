#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Two modes ([`Mode`]):
//!
//! - **Warm**: one long-lived container per sandbox (its keepalive under an init, labelled, with
//!   the limits, runtime and ulimits given); every command is a Docker exec in it, so files and
//!   processes persist between commands.
//! - **Per call**: every command gets a fresh container (the same settings, plus the worktree
//!   bind-mounted at `/workspace`, the default workdir), removed before the command's result is
//!   returned. Only the worktree survives between commands.
//!
//! In both, a command is an exec: `POST /containers/{id}/exec` (argv as `Cmd`, `Env`,
//! `WorkingDir`, `User`, never a TTY), `POST /exec/{id}/start` hijacked into multiplexed
//! stdout/stderr frames, then `GET /exec/{id}/json` for the exit code.
//!
//! # Capabilities ([`CAPABILITIES`])
//!
//! | field | value | how |
//! |---|---|---|
//! | argv | native | the exec's `Cmd` array |
//! | stdin | temp file | attached, then half-closed; a `sh` wrapper first stores all of it (`cat`) in a 0600 file under [`DockerConfig::temp_dir`], which becomes the command's stdin and is removed before it starts (podman loses output when an exec exits with attached stdin unread); empty stdin is not attached (`/dev/null`) |
//! | workdir | native | the exec's `WorkingDir`; a missing one is `Err(NotFound)` |
//! | env | shell-wrapped | never in an engine request (bollard logs request bodies at DEBUG): the first line of the attached stdin, read by the stdin wrapper, then `exec env -- … argv` (which also keeps values with a newline, which podman's `Env` cuts) |
//! | streaming | yes | the frames as they arrive |
//! | remote_kill | yes | warm: every process carrying the exec's [`EXEC_TAG_VAR`] is SIGKILLed by a kill exec; per call: the container is removed |
//! | binary_output | yes | frames carry raw bytes |
//!
//! # What the engine gets wrong, and what the adapter does
//!
//! - **Exit codes come from exec inspect** after the output ends (polled while the exec still
//!   runs), never from a container's wait status: through podman's compat socket `docker run
//!   --rm` reports 0 for a command that exited 3, and an init reports 1 for a missing program.
//! - **125/126/127 are results.** A command that exits with them is `Ok`; the engine's own
//!   failures (image missing, container cannot start, container gone) are typed errors from the
//!   API's answer. A missing program is 127 with the runtime's message, as in a shell. A missing
//!   workdir is also 125-127 from the runtime: the adapter then stats the workdir through the
//!   archive API and reports `Err(NotFound)` if it is not a directory.
//! - **A stopped or removed container is an error**, not the 137 the exec then reports: on
//!   137/143 the adapter inspects the container.
//! - **podman writes its own errors into the stderr frames** (libpod `hijackWriteError`); its
//!   attach-reset line is dropped after a failed start and is a `Protocol` error anywhere else it
//!   ends a stream (frames may have been lost).
//! - **podman's transient `stopped` state** is not in Docker's schema; it reads as "not running".
//!
//! Error mapping: see `error.rs` (rendered in `docs/adapters/docker.md`).
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, Delivery, LifecycleCapabilities, SpecSupport};

mod client;
pub mod config;
mod containers;
mod error;
mod exec;
mod provider;
mod state;
mod terminal;

pub use client::{LABEL_MANAGED, LABEL_MODE, LABEL_SANDBOX};
pub use config::{DEFAULT_MAX_ANSWER, DockerConfig, Mode, Ulimit};
pub use exec::{DockerExec, DockerOutput, EXEC_TAG_VAR};
pub use provider::{DockerProvider, OPTIONS};
pub use state::{LABEL_SNAPSHOT_SOURCE, SNAPSHOT_REPOSITORY, STATE};

/// The provider name in errors, reports and the registry.
pub const PROVIDER: &str = "docker";

/// The configuration variables [`DockerConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::url("DOCKER_HOST"),
    Var::text("DOCKER_TLS_VERIFY"),
    Var::text("DOCKER_CERT_PATH"),
    Var::text("EXECSEAM_DOCKER_IMAGE").required(),
    Var::choice("EXECSEAM_DOCKER_MODE", &["warm", "per-call"]),
    Var::text("EXECSEAM_DOCKER_WORKTREE"),
    Var::text("EXECSEAM_DOCKER_RUNTIME"),
    Var::text("EXECSEAM_DOCKER_ULIMITS"),
    Var::text("EXECSEAM_DOCKER_USER"),
    Var::text("EXECSEAM_DOCKER_NETWORK"),
    Var::number("EXECSEAM_DOCKER_MEMORY"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Docker {
        about: "containers over the Docker Engine API, Docker or podman (EXECSEAM_DOCKER_MODE=warm: a long-lived container per sandbox; per-call: a fresh container per command)",
        config: DockerConfig,
        provider: DockerProvider,
    }

    fn capabilities(config: &DockerConfig) -> Capabilities {
        capabilities_of(config.mode)
    }

    fn lifecycle(config: &DockerConfig) -> LifecycleCapabilities {
        match config.mode {
            Mode::Warm => LIFECYCLE,
            Mode::PerCall => PER_CALL_LIFECYCLE,
        }
    }
}

const SPEC: SpecSupport = SpecSupport {
    image: true,
    env: true,
    labels: true,
    lifetime: true,
    idle_timeout: false,
    cpu: true,
    memory: true,
    disk: false,
};

/// Warm mode: create (`POST /containers/create` + start: image, `Env`, `Labels`, `NanoCpus`,
/// `Memory`, a lifetime as the keepalive's `sleep` with auto-remove), connect
/// (`GET /containers/{id}/json`), list (`GET /containers/json` by label), destroy
/// (`DELETE /containers/{id}?force=1&v=1`). Options: [`OPTIONS`]. Sandbox state: [`STATE`]
/// (pause, commit snapshots, fork by snapshot, ports published at create).
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SPEC,
    options: OPTIONS,
    state: STATE,
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// Per call: create (an image check; the spec applies to every command's container) and destroy
/// (removes the containers of commands still running); nothing persists to connect to or list,
/// pause, snapshot or expose.
pub const PER_CALL_LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    connect: false,
    list: false,
    state: execseam_core::StateCapabilities::NONE,
    ..LIFECYCLE
};

/// The largest command (argv and env) sent, checked before any I/O: the engine `execve`s the
/// exec's `Cmd` with its `Env` in the container (128 KiB per string, 2 MiB less 256 KiB in all, the rest
/// of `ARG_MAX` left to the image's environment). The fallback: the first command over 64 KiB
/// asks the container (`size::ArgMax`: its `getconf ARG_MAX` less its environment; an image or
/// `--ulimit stack` sets it) and is checked against that, the wrapped form too.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit = execseam_adapter_kit::size::CONTAINER;

/// What this adapter does; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    stdin: Delivery::TempFile,
    env: Delivery::ShellWrapped,
    processes: Some(execseam_core::ProcessCapabilities {
        terminal: true,
        // The kit's attached terminals: the engine has no exec attach (`Attached::new`).
        terminal_reattach: false,
        ..execseam_adapter_kit::spool::SPOOLED
    }),
    ..Capabilities::FULL
};

/// The capabilities of a mode: per call, no process handles (the container is removed after
/// each command, and a command's processes with it).
pub const fn capabilities_of(mode: Mode) -> Capabilities {
    match mode {
        Mode::Warm => CAPABILITIES,
        Mode::PerCall => Capabilities {
            processes: None,
            ..CAPABILITIES
        },
    }
}
