#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Code outside a Worker cannot reach a Cloudflare sandbox directly: the Sandbox SDK is a Durable
//! Object library and the container's own API listens only inside Cloudflare. Cloudflare's answer
//! is the bridge, a reference Worker that you deploy in your account and call over HTTP with
//! `Authorization: Bearer <SANDBOX_API_KEY>`. This adapter speaks that API:
//! `POST /v1/sandbox` (a new id), `POST /v1/sandbox/{id}/exec` (`{argv, timeout_ms, cwd}`,
//! answered with an SSE stream of base64 `stdout`/`stderr` events and a terminal `exit` or
//! `error`), `GET`/`PUT /v1/sandbox/{id}/file/<path>`, sessions through the `Session-Id` header,
//! `GET /v1/sandbox/{id}/running` and `DELETE /v1/sandbox/{id}`.
//!
//!
//! # Capabilities and degradations
//!
//! | | streaming mode (default) | exact mode |
//! |---|---|---|
//! | argv | shell-wrapped: the bridge only runs `bash -c <string>`; the adapter sends `/bin/sh -c <script>` where the script quotes argv exactly ([`execseam_adapter_kit::degrade`]) | same |
//! | workdir | shell-wrapped (`cd`), any absolute directory; a missing one is `NotFound` | same |
//! | env | shell-wrapped (`env --`): the exec request has no env field | same |
//! | stdin | temp file: uploaded with `PUT /file` under `/workspace/.execseam/`, then redirected (32 MiB at most) | same |
//! | stdout/stderr bytes | **lossy**: the bridge decodes output as UTF-8 text, so invalid bytes arrive as U+FFFD (`binary_output: false`) | **exact**: redirected to files and fetched raw |
//! | streaming | yes ([`ExecStream`](execseam_core::ExecStream)) | no (output is fetched after the exit) |
//! | remote kill | no: the bridge has no kill route and does not stop a command when the client goes away | no |
//!
//! Why streaming is the default: agent tools mostly read text, live output matters for long
//! commands, and exact mode costs three more requests per command and leaves nothing to show
//! before the exit. Choose [`OutputMode::Exact`] when bytes matter (binary files through `cat`,
//! `base64` is not an option, …).
//!
//! # Quirks handled
//!
//! - The SSE `exit` event is the only success terminator. A stream that ends without it is a
//!   `Protocol` error; an SSE `error` event is an error with `Retry::Unsafe` (the command was
//!   started). A JSON `{"error","code"}` answer before the stream is mapped by code and status
//!   (see `docs/adapters/cloudflare.md`, "Errors"): `capacity_exceeded` and `pool_error` are `Unavailable` with `Retry::Safe`
//!   (the sandbox's container was not even assigned), `unauthorized` is `Unauthenticated`, a
//!   `cwd` or path outside `/workspace` (403 `invalid_request`) is `PermissionDenied`.
//! - The bridge gives any well-formed sandbox id a container on first use, and a fresh one when
//!   the old container stopped or was destroyed: a deleted sandbox does not fail, it silently
//!   comes back empty. With `verify_sandbox` (default) the adapter plants a marker file when it
//!   connects and every command checks it first, so this case is `Err(NotFound)`.
//! - The adapter's script runs the command in a subshell, so a signal death reaches the bridge
//!   as the shell's 128+n from a normally exiting process (the bridge only carries a number).
//! - No request is retried automatically, and the exec never is; `connect` retries only
//!   answers that prove nothing ran, with backoff.
//! - Tokens never reach `Debug` or tracing; `argv[0]` is annotated into the bridge's traces by
//!   the bridge itself, and here it is always `/bin/sh`.
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod exec;
mod provider;
#[cfg(test)]
mod session_tests;
mod terminal;
mod wire;

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, Delivery, LifecycleCapabilities};

pub use config::{CloudflareConfig, DEFAULT_MAX_ANSWER_BYTES, OutputMode};
pub use exec::{CloudflareExec, MAX_WRITE, TEMP_DIR};
pub use execseam_adapter_kit::attached::TerminalMode;
pub use provider::CloudflareProvider;

/// The configuration variables [`CloudflareConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::url("CLOUDFLARE_SANDBOX_WORKER_URL").required(),
    Var::secret("CLOUDFLARE_SANDBOX_API_KEY"),
    Var::text("CLOUDFLARE_SANDBOX_SESSION_ID"),
    Var::choice("EXECSEAM_CLOUDFLARE_MODE", &["fast", "exact"]),
    Var::choice("EXECSEAM_CLOUDFLARE_TERMINAL", TerminalMode::WORDS),
    Var::text("EXECSEAM_CLOUDFLARE_SNAPSHOT_DIR"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Cloudflare {
        about: "Cloudflare Sandbox through the sandbox bridge Worker (EXECSEAM_CLOUDFLARE_MODE=exact for byte-exact output)",
        config: CloudflareConfig,
        provider: CloudflareProvider,
    }

    // `POST /v1/sandbox` only mints an id (16 random bytes in base32; the bridge keeps nothing
    // for it: `bridge/worker/index.ts`), a container is assigned at the id's first use, which
    // the adapter makes holding the id and deletes on a failure.
    const LOST_CREATE: execseam_adapter_kit::guard::LostCreate = execseam_adapter_kit::guard::LostCreate::NothingMade(
        "the bridge's create only mints an id; the container comes at the id's first use, which the adapter holds the id for and deletes on a failure",
    );

    fn capabilities(config: &CloudflareConfig) -> Capabilities {
        CloudflareExec::capabilities_of(config)
    }
}

/// The bridge's lifecycle (see [`CloudflareProvider`]): mint an id, connect to a running
/// sandbox, delete. The bridge has no list route, and a sandbox takes no image, env, labels or
/// sizes from the caller (they are the Worker's deployment).
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    list: false,
    // Exposed ports are the bridge's ephemeral tunnels (`POST|DELETE /v1/sandbox/{id}/tunnel/
    // {port}`, `packages/sandbox/src/bridge/routes.ts`): any port 1024-65535 but 3000 (the
    // control port, the SDK's `validatePort`), at any time, public (a quick tunnel has no
    // token); no list route. Snapshots are the bridge's `persist` (a tar of `/workspace`,
    // taken with `tar cf` while commands run on: not frozen) kept as a file on this host, and a
    // create from one is a new sandbox `hydrate`d with it (`POST /v1/sandbox/{id}/persist`,
    // `/hydrate`, same file); the OpenAI Agents SDK's Cloudflare client snapshots the same way.
    // A fork is a snapshot and a create from it; nothing is shared afterwards.
    state: execseam_core::StateCapabilities {
        snapshot: Some(execseam_core::SnapshotSupport {
            scope: execseam_core::Scope::Dir("/workspace"),
            ..execseam_core::SnapshotSupport::FILESYSTEM
        }),
        fork: Some(execseam_core::ForkSupport::SNAPSHOT_AND_CREATE),
        expose: Some(execseam_core::ExposeSupport {
            when: execseam_core::PortsWhen::AnyTime,
            auth: execseam_core::PortAuth::None,
            list: false,
            unexpose: true,
            ports: (1024, 65535),
            reserved: &[3000],
            only: None,
        }),
        ..execseam_core::StateCapabilities::NONE
    },
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The largest command (argv and env) sent, checked before any I/O: the command reaches the
/// sandbox as one `bash -c` string (the bridge quotes and joins the adapter's `/bin/sh -c`
/// argv), a single `execve` string of at most 128 KiB (`MAX_ARG_STRLEN`). The check is on that
/// string as sent (`size::check_wire`); the raw command's size is only its fast lower
/// bound.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::script(
        execseam_adapter_kit::size::MAX_ARG_STRLEN - 1,
        "one bash -c string in the Cloudflare container: 128 KiB after wrapping and quoting",
    );

/// The provider name in errors and reports.
pub const PROVIDER: &str = "cloudflare";

/// Capabilities in the default [`OutputMode::Streaming`].
pub const CAPABILITIES: Capabilities = Capabilities {
    argv: Delivery::ShellWrapped,
    stdin: Delivery::TempFile,
    workdir: Delivery::ShellWrapped,
    env: Delivery::ShellWrapped,
    remote_kill: false,
    binary_output: false,
    max_stdin: Some(MAX_WRITE),
    processes: Some(TERMINALS),
    ..Capabilities::FULL
};

/// Process handles: the kit's spool, with terminals on its recorder by default
/// ([`CloudflareConfig::terminal`]; the bridge's terminal WebSocket replays a new connection's
/// scrollback without offsets: no exact reattach there, `terminal.rs`).
const TERMINALS: execseam_core::ProcessCapabilities = execseam_adapter_kit::spool::SPOOLED_TERMINAL;

/// Capabilities in [`OutputMode::Exact`].
pub const CAPABILITIES_EXACT: Capabilities = Capabilities {
    streaming: false,
    binary_output: true,
    ..CAPABILITIES
};
