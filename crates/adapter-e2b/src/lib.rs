#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! execseam adapter for [E2B](https://e2b.dev) sandboxes.
//!
//! Two planes, as in the official SDKs:
//!
//! - the **control plane** (`https://api.<domain>`, `X-API-KEY`): create a sandbox
//!   (`POST /v2/sandboxes`, or the legacy `POST /sandboxes`), connect to a running or paused one
//!   (`POST /v2/sandboxes/{id}/connect`), kill it (`DELETE /sandboxes/{id}`);
//! - **envd** inside the sandbox, spoken to with the Connect protocol and the JSON codec
//!   (`process.Process/Start` and friends, `filesystem.Filesystem/ListDir`), plus its plain
//!   `/files` and `/health` routes. Every envd request carries the routing headers
//!   `E2b-Sandbox-Id`/`E2b-Sandbox-Port` and the sandbox's `X-Access-Token`.
//!
//! # Capabilities
//!
//! | | |
//! |---|---|
//! | argv | native: `ProcessConfig{cmd: argv[0], args: argv[1..]}`, no `bash -l -c` |
//! | workdir | native (`cwd`); a missing one is `Err(NotFound)` (envd's `invalid_argument "cwd '…' does not exist"`) |
//! | env | native (`envs`, on top of envd's `PATH`, `HOME`, `USER`, `LOGNAME` and the sandbox's `envVars`) |
//! | stdin | native: `stdin: true` only when [`Command::stdin`](execseam_core::Command::stdin) is non-empty, then `SendInput` (≤ 64 KiB) or `StreamInput`, then `CloseStdin`; otherwise envd gives the process `/dev/null` |
//! | streaming | yes: envd's data events, as they come (≤ 32 KiB each) |
//! | remote kill | yes: dropping an exec or its stream sends `SendSignal SIGKILL` (by tag until the pid is known) |
//! | binary output | yes (base64 bytes) |
//! | process handles | yes: [`Processes`](execseam_core::Processes) from the adapter kit's spool, output and exit in files in the sandbox (envd drops output nobody is subscribed to and keeps an ended process's exit 30 s) |
//! | native tools | `list` and `glob` from `filesystem.Filesystem/ListDir` (with `depth`) when the answer is provably what `find` would print (see below); otherwise, and for `grep`, the script runs |
//!
//! # Exit status
//!
//! envd's end event carries Go's `ProcessState`: `exited` with `exitCode` (absent means 0, proto3
//! JSON omits defaults), or, for a process killed by a signal, `exitCode: -1` with the status
//! `signal: killed`, which becomes [`Exit::Signal(9)`](execseam_core::Exit::Signal). A non-zero
//! exit is an `Ok` result, never an error (the SDK raises `CommandExitException` for it). An end
//! event that says neither, or a stream that ends without one, is an `Err(Protocol)`.
//!
//! # Quirks
//!
//! - envd does not kill a process when its stream is closed (commands outlive their client,
//!   e2b-dev/E2B#500); this adapter kills it explicitly.
//! - envd's `Connect-Timeout-Ms` on `Start` is the process lifetime: it is sent only when
//!   [`E2bConfig::command_timeout`] is set.
//! - A dead sandbox answers `502 {"message":"The sandbox was not found"}` from the edge proxy; an
//!   ambiguous `unavailable` (or a cut stream) is resolved by probing `GET /health`, as the SDK
//!   does. See [`error`](crate#errors) below for the four timeouts.
//!
//! # Native listings
//!
//! Commands built by `execseam-tools` for [`Tool::LIST`] and [`Tool::GLOB`] (recognised with
//! [`execseam_tools_protocol::native::NativeRequest::parse`]) are answered from `Stat` + `ListDir` instead
//! of running `find`, but only when the result is certain to be byte-identical: envd's filesystem
//! calls run as root while commands run as the sandbox user, so every directory `find` would read
//! must be readable by that user according to the reported owner, group and mode (supplementary
//! groups are not counted); a symlinked root, an entry reported outside the root or any unexpected
//! `ListDir` error runs the script instead. [`E2bConfig::native_tools`] turns this off.
//!
//! # Errors
//!
//! See the module docs of `error.rs` (rendered in `docs/adapters/e2b.md`): every HTTP status,
//! every Connect code and the transport map to an [`ErrorKind`](execseam_core::ErrorKind) and a
//! [`Retry`](execseam_core::Retry); `Timeout(Request | Command | SandboxLifetime | Unknown)` are
//! told apart.
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, LifecycleCapabilities, SpecSupport, Tool};

mod client;
mod config;
mod connect;
mod error;
mod exec;
mod native;
mod provider;
mod state;
mod wire;

pub use config::{ApiRoutes, E2bConfig, ENVD_PORT, SHARED_HOST_DOMAINS};
pub use connect::{Code, RpcError};
pub use exec::{Attach, E2bExec, EnvdVersion};
pub use provider::E2bProvider;
pub use state::STATE;

/// The provider name in errors and reports.
pub const PROVIDER: &str = "e2b";

/// The configuration variables [`E2bConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::secret("E2B_API_KEY").required(),
    Var::text("E2B_DOMAIN"),
    Var::url("E2B_API_URL"),
    Var::url("E2B_SANDBOX_URL"),
    Var::text("E2B_TEMPLATE"),
    Var::seconds("E2B_SANDBOX_TIMEOUT"),
    Var::seconds("E2B_COMMAND_TIMEOUT"),
    Var::text("E2B_USER"),
    Var::choice("E2B_API_ROUTES", &["v2", "legacy"]),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct E2b {
        about: "E2B sandboxes: control plane plus envd over Connect",
        config: E2bConfig,
        provider: E2bProvider,
    }
}

/// E2B's lifecycle: create (`POST /v2/sandboxes`: template, `envVars`, `metadata`, `timeout`),
/// connect (`POST /v2/sandboxes/{id}/connect`), list (`GET /v2/sandboxes?metadata=`), destroy
/// (`DELETE /sandboxes/{id}`). Resources come from the template. Sandbox state: [`STATE`]
/// (pause/resume, snapshot templates, native fork, ports by host).
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        image: true,
        env: true,
        labels: true,
        lifetime: true,
        ..SpecSupport::NONE
    },
    state: STATE,
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The largest command (argv and env) sent where the sandbox has not said what its `execve`
/// takes: envd `execve`s it in the sandbox (through `/bin/sh -c … exec nice "$@"`), so Linux's
/// limits apply: 128 KiB per string, and of the 2 MiB `ARG_MAX` 256 KiB is kept for envd's own
/// environment. The first command over 64 KiB asks the sandbox (`size::ArgMax`: its
/// `getconf ARG_MAX` and environment, once per sandbox) and is checked against its answer.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the E2B sandbox: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

/// What this adapter does; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    native_tools: &[Tool::LIST, Tool::GLOB],
    processes: Some(execseam_adapter_kit::spool::HYBRID_TERMINAL),
    ..Capabilities::FULL
};
