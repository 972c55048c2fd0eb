#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! # Capabilities ([`CAPABILITIES`]; [`HTTP_CAPABILITIES`] for the POST fallback)
//!
//! | field | WebSocket | HTTP POST |
//! |---|---|---|
//! | argv | native: `cmd` once per element, `path` = argv[0], exec'd without a shell | same |
//! | stdin | native: `stdin=true`, `[0x00]+chunk` frames (16 KiB, `WsBuffers::stdin_chunk`), then `[0x04]`; empty stdin is `stdin=false` (`/dev/null`) | the request body |
//! | workdir | native: `dir`; a missing workdir is `Err(NotFound)` (see quirks) | same |
//! | env | native: `env=K=V`, over the base environment ([`BaseEnv`]) | same |
//! | streaming | yes | no |
//! | remote_kill | yes: dropping the exec or the stream calls `POST /exec/{session}/kill?signal=KILL` | no |
//! | binary_output | yes: binary frames | no: frames have no length, so bytes are attributed per HTTP chunk |
//! | process handles | yes: [`Processes`](execseam_core::Processes) from the adapter kit's spool, output and exit in files in the sprite (the attach replay is a bounded scrollback without offsets) | yes |
//! | terminals | the kit's recorder (`script(1)`) by default: reattachable from any handle or process; with `EXECSEAM_SPRITES_TERMINAL=attached`, Sprites' TTY exec (`tty=true`, `rows`, `cols`; resize messages), held by the handle that opened it (`terminal_reattach: false`) | the kit's recorder (`script(1)`): reattachable |
//!
//! # Quirks
//!
//! - **The exit code is one byte** (`[0x03, code]`); a command killed by a signal is reported as
//!   whatever the server sends (128+n from a container runtime, 255 from the 2025 server), as
//!   `Exit::Code`. A text `{"type":"exit","exit_code":N}` is accepted too. An exit frame without
//!   its code, an unknown frame id, or a socket that ends before the exit is an `Err`
//!   (`Protocol`/`Unavailable`, `Retry::Unsafe`), never an invented exit code.
//! - **The adapter closes the socket** right after the exit frame (the server keeps it open ~5 s).
//! - **`env` replaces the environment** (API reference) or merges (2025 server code): with
//!   [`BaseEnv::Discover`] the sprite's own environment is read once (`env -0`) and sent under
//!   `Command::env`, which is right either way.
//! - **A missing workdir**: the server cannot start the process and drops the socket (WebSocket)
//!   or answers 500 (POST); the adapter then asks the filesystem API (`GET /fs/list`) and reports
//!   `Err(NotFound)` if the directory is missing.
//! - **Unknown sprite**: `404`, or the observed `500 {"error":"failed to retrieve sprite"}`: both
//!   `Err(NotFound)`, `Retry::Never`.
//!
//! Error mapping and live configuration: `docs/adapters/sprites.md`.
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, LifecycleCapabilities};

mod client;
mod config;
mod error;
mod exec;
mod provider;
mod terminal;
mod wire;

pub use config::{BaseEnv, DEFAULT_BASE_URL, SpritesConfig, Transport, WsBuffers};
pub use exec::{SpritesExec, parse_http_body};
pub use execseam_adapter_kit::attached::TerminalMode;
pub use provider::SpritesProvider;

/// The largest command (argv and env) sent, checked before any I/O: the sprite `execve`s it
/// (128 KiB per string); in all it must also fit the exec URL's query
/// ([`MAX_EXEC_URL`](client::MAX_EXEC_URL) bytes, checked on the encoded URL). The URL's
/// 60 KiB is below what any Linux `execve` takes (`ARG_MAX` is never under 128 KiB,
/// `size::SURELY_FITS`), so the sprite's own limit is never asked (issue 38, D32): a command
/// larger than that is refused for the URL, before any request.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the sprite: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

pub use client::{MAX_EXEC_URL, MAX_WS_FRAME};

/// The capabilities over WebSockets (the default transport).
pub const CAPABILITIES: Capabilities = Capabilities {
    // Terminals on the recorder by default (`SpritesConfig::terminal`): Sprites' own TTY exec,
    // held by the handle that opened it, replays a bounded scrollback without offsets when
    // attached again, so no exact reattach there (terminal.rs).
    processes: Some(execseam_adapter_kit::spool::SPOOLED_TERMINAL),
    ..Capabilities::FULL
};

/// The capabilities over the HTTP POST fallback: no TTY there, so terminals are always the
/// kit's recorder (`script(1)` in the sprite), which any handle can attach to again.
pub const HTTP_CAPABILITIES: Capabilities = Capabilities {
    streaming: false,
    remote_kill: false,
    binary_output: false,
    processes: Some(execseam_adapter_kit::spool::SPOOLED_TERMINAL),
    ..CAPABILITIES
};

/// Sprites' lifecycle (see [`SpritesProvider`]): a sprite is created by name (generated), found,
/// listed and deleted; it has no image, env, labels or sizes to ask for.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    options: &["name"],
    // Checkpoints (docs.sprites.dev/concepts/checkpoints): "A checkpoint snapshots the writable
    // filesystem overlay … does not capture anything that only lives in memory"; restore is in
    // place ("Restore rewinds the filesystem. Running processes stop."); no create-from, no
    // delete (sprites-py 0.7.2 has none), no ttl; the comment is not a name execseam sets.
    state: execseam_core::StateCapabilities {
        snapshot: Some(execseam_core::SnapshotSupport {
            create_from: false,
            restore_in_place: true,
            delete: false,
            ..execseam_core::SnapshotSupport::FILESYSTEM
        }),
        // The sprite URL (docs.sprites.dev/concepts/networking): one per sprite, routing to
        // 8080 unless a running service names an `http_port`; `url_settings.auth: sprite`
        // (the default for the sprites this adapter makes) takes the API token as a bearer
        // header, `public` nothing (the header is then left out).
        expose: Some(execseam_core::ExposeSupport {
            when: execseam_core::PortsWhen::AnyTime,
            auth: execseam_core::PortAuth::Header("Authorization"),
            list: false,
            unexpose: false,
            ports: (1, 65535),
            reserved: &[],
            only: Some(8080),
        }),
        ..execseam_core::StateCapabilities::NONE
    },
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The configuration variables [`SpritesConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::secret("SPRITE_TOKEN").required(),
    Var::url("SPRITES_API_URL"),
    Var::choice(
        "SPRITES_EXEC_TRANSPORT",
        &["websocket", "ws", "http", "post"],
    ),
    Var::choice("EXECSEAM_SPRITES_TERMINAL", TerminalMode::WORDS),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Sprites {
        about: "Fly Sprites over the exec WebSocket (SPRITES_EXEC_TRANSPORT=http for the POST fallback)",
        config: SpritesConfig,
        provider: SpritesProvider,
    }

    // A sprite's name is its id (`POST /v1/sprites {"name"}`, then `/v1/sprites/{name}`): a
    // create whose answer was lost is found by a name the guard gives it.
    const LOST_CREATE: execseam_adapter_kit::guard::LostCreate =
        execseam_adapter_kit::guard::LostCreate::Named("name");

    fn capabilities(config: &SpritesConfig) -> Capabilities {
        SpritesExec::capabilities_of(config)
    }
}

/// The provider name in errors and capabilities.
pub const PROVIDER: &str = "sprites";
