#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! # How a command runs
//!
//! [`Exec::exec`](execseam_core::Exec::exec) is one `POST /process/execute` by default
//! ([`ExecRoute::Execute`]). That route merges stdout and stderr into one `result` string, so the
//! command runs under a small frame (`DIRECT_FRAME` in `src/exec.rs`, evaluated by the daemon's own shell
//! from the request's `envs`) that writes each stream to a file and, once the command has
//! exited, sends both back one after the other in base64 with a status trailer; the adapter decodes the exact bytes and checks the trailer against Daytona's
//! `exitCode`. The answer is awaited without a request timeout (the command may be long), but
//! every idle period a short probe asks the sandbox whether the frame still runs; a dropped exec
//! (the host's deadline) kills its process group with another short request.
//!
//! Streams ([`ExecStream`](execseam_core::ExecStream)), and `exec` with [`ExecRoute::Session`],
//! run in **sessions** (`POST /process/session/{id}/exec`) that a handle keeps in a small pool
//! ([`DaytonaConfig::session_pool`]): a session is created only when all are busy, and deleted
//! instead of reused when its command did not end cleanly; deleting it is also how an abandoned
//! command is killed. Each command runs in a `/bin/sh` of its own, so nothing it does stays in
//! the session's shell. The daemon labels session output line by line (a `\n` is added to a last
//! line without one, NUL bytes are lost), so the command runs under a framing script that
//! base64-encodes each stream into lines and appends trailers. A synchronous session exec is
//! answered only on the daemon's 50 ms poll of the exit-code file, which is why `exec` takes
//! the other route. `src/exec.rs` has the details.
//!
//! We announce `X-Daytona-SDK-Version: 0.226.1`, which makes the daemon split `stdout` and
//! `stderr` in its answers; the raw `output` with `\x01\x01\x01` / `\x02\x02\x02` line prefixes
//! (what older daemons send) is demultiplexed too.
//!
//! # Capabilities and degradations ([`CAPABILITIES`])
//!
//! | part | delivery |
//! |---|---|
//! | argv | shell-wrapped: quoted exactly with `execseam_adapter_kit::degrade` (the daemon runs a shell) |
//! | workdir, env | shell-wrapped by the kit's wrapper (`cd`, `env --`); a missing workdir is `Err(NotFound)` |
//! | stdin | a temp file uploaded with the files API (`POST /files/bulk-upload`), then redirected; the session input route takes text only |
//! | stdout/stderr | separate and byte-exact (binary included) |
//! | streaming | yes: the `logs?follow=true` WebSocket |
//! | remote kill | yes: dropping the exec kills its process group (`process/execute`), or deletes its session, which kills its process tree |
//! | native tools | none: `find_files` is a literal search that skips binary files and `search_files` matches directories and returns paths as JSON strings, so neither gives the bytes `grep`/`find` would ([`DaytonaExec::find_in_files`] and [`DaytonaExec::search_files`] are available as such) |
//!
//! Errors: the `{statusCode, message, code, source}` envelope maps to [`ErrorKind`](execseam_core::ErrorKind)
//! by status (404 `NotFound`, 401 `Unauthenticated`, 429 `RateLimited` with `Retry-After`, 408
//! `Timeout`, 410 `SESSION_ENDED` `Unavailable`, 5xx `Internal`/`Unavailable`), and from the
//! request that runs the command on, every failure that may follow a run is `Retry::Unsafe`. That
//! request has no timeout and is never re-sent (reqwest's retries are off); `process/execute`
//! gets a daemon-side deadline of a year, so that only the host's deadline applies (current
//! daemons kill at 360 s by default).
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, Delivery, Error, LifecycleCapabilities, SpecSupport};

mod client;
mod config;
mod error;
mod exec;
mod provider;
mod state;
mod terminal;
mod wire;

pub use config::{
    DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_OUTPUT, DEFAULT_SESSION_POOL, DaytonaConfig, ExecRoute,
};
pub use exec::DaytonaExec;
pub use execseam_adapter_kit::attached::TerminalMode;
pub use provider::DaytonaProvider;
pub use state::{PREVIEW_TOKEN_HEADER, STATE};

/// The provider name in errors and reports.
pub const PROVIDER: &str = "daytona";

/// The largest command (argv and env) sent, checked before any I/O: it travels as one shell
/// line that runs the framing script with the kit's wrapper script as one argument, and the
/// sandbox `execve`s them (128 KiB per string, the wrapper script after quoting included; 2 MiB less
/// 256 KiB in all, the rest of `ARG_MAX` left to the session's environment). The raw command is checked
/// first (a fast lower bound), then the strings as sent (`size::check_wire`).
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the Daytona sandbox: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

pub(crate) fn check_size(cmd: &execseam_core::Command) -> Result<(), Error> {
    execseam_adapter_kit::size::check_size(PROVIDER, cmd, &SIZE_LIMIT)
}

/// What the Daytona adapter does; see the crate docs for each degradation.
pub const CAPABILITIES: Capabilities = Capabilities {
    argv: Delivery::ShellWrapped,
    stdin: Delivery::TempFile,
    workdir: Delivery::ShellWrapped,
    env: Delivery::ShellWrapped,
    max_output: Some(DEFAULT_MAX_OUTPUT),
    // Hybrid handles (the spool's supervisor a session command: `exec.rs`, `Launch`); terminals
    // on the recorder by default ([`DaytonaConfig::terminal`]; [`capabilities_of`]).
    processes: Some(TerminalMode::Recorder.capabilities(execseam_adapter_kit::spool::HYBRID)),
    ..Capabilities::FULL
};

/// [`CAPABILITIES`] with terminals where `mode` puts them: reattachable only on the recorder
/// (the daemon keeps no scrollback of a PTY session: `terminal.rs`).
pub(crate) const fn capabilities_of(mode: TerminalMode) -> Capabilities {
    Capabilities {
        processes: Some(mode.capabilities(execseam_adapter_kit::spool::HYBRID)),
        ..CAPABILITIES
    }
}

/// Daytona's lifecycle (see [`DaytonaProvider`]): create from a snapshot with env, labels and an
/// idle stop; connect, list by labels, delete. Resources come from the snapshot; a lifetime has
/// no equivalent. Sandbox state (stop/start, snapshots, forks by snapshot, preview links):
/// [`STATE`].
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        image: true,
        env: true,
        labels: true,
        idle_timeout: true,
        ..SpecSupport::NONE
    },
    state: STATE,
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The configuration variables [`DaytonaConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::secret("DAYTONA_API_KEY"),
    Var::secret("DAYTONA_JWT_TOKEN"),
    Var::text("DAYTONA_ORGANIZATION_ID"),
    Var::url("DAYTONA_API_URL"),
    Var::url("DAYTONA_SERVER_URL"),
    Var::text("DAYTONA_TARGET"),
    Var::text("DAYTONA_SNAPSHOT"),
    Var::text("EXECSEAM_DAYTONA_TEMP_DIR"),
    Var::url("EXECSEAM_DAYTONA_TOOLBOX_URL"),
    Var::choice("EXECSEAM_DAYTONA_TERMINAL", TerminalMode::WORDS),
    Var::seconds("EXECSEAM_DAYTONA_SIGNED_PREVIEWS"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Daytona {
        about: "Daytona sandboxes (each command in its own session)",
        config: DaytonaConfig,
        provider: DaytonaProvider,
    }
}
