#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Commands use the awaited form of `POST /v2/sandboxes/sessions/{id}/cmd` (`wait`, `logs`): an
//! `application/x-ndjson` stream of `{command}` (started, `exitCode: null`), `{"stream":
//! "stdout"|"stderr","data"}` lines, and the finished `{command}` with the exit code. argv goes
//! as `command` + `args` and is exec'd without a shell; `workdir` is `cwd`; `env` is `env`;
//! stdin goes through `POST …/cmd/{id}/stdin` (the Python SDK's route: `attachStdin`, base64
//! chunks at confirmed offsets, then the close). Output is JSON text, so bytes that are not
//! UTF-8 do not survive (`binary_output: false`).
//!
//! A signal death is reported by the service as 128+n and kept as [`Exit::Code`]
//! (`execseam_core::Exit`): 137 and 143 are ambiguous, as everywhere. Dropping an exec or its
//! stream kills the command (`POST …/cmd/{id}/kill {signal: 9}`). A stopped sandbox (`410`) is
//! resumed and the request sent once more, as the SDKs do; a command submit is otherwise never
//! retried.
//!
//! Error mapping, the lifecycle and what is not verified: `docs/adapters/vercel.md`.
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, LifecycleCapabilities, SpecSupport};

mod client;
mod config;
mod error;
mod exec;
mod provider;
mod wire;

pub use config::{DEFAULT_API_URL, DEFAULT_STREAM_IDLE_TIMEOUT, VercelConfig};
pub use exec::{SANDBOX_CWD, VercelCommand, VercelExec};
pub use provider::VercelProvider;

/// The largest command (argv and env) sent, checked before any I/O: the sandbox `execve`s the
/// command and args it is given (128 KiB per string, 2 MiB less 256 KiB in all, the rest of `ARG_MAX` left
/// to the sandbox's environment). The fallback: the first command over 64 KiB asks the sandbox
/// (`size::ArgMax`: its `getconf ARG_MAX` less its environment) and is checked against that.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the Vercel sandbox: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

/// The provider name in errors and reports.
pub const PROVIDER: &str = "vercel";

/// The configuration variables [`VercelConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::secret("VERCEL_TOKEN"),
    Var::text("VERCEL_TEAM_ID"),
    Var::text("VERCEL_PROJECT_ID"),
    Var::secret("VERCEL_OIDC_TOKEN"),
    Var::url("VERCEL_API_URL"),
    Var::text("VERCEL_SANDBOX_RUNTIME"),
    Var::seconds("VERCEL_SANDBOX_TIMEOUT"),
    Var::number("VERCEL_SANDBOX_VCPUS"),
    Var::seconds("VERCEL_COMMAND_TIMEOUT"),
    Var::flag("VERCEL_SANDBOX_SUDO"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Vercel {
        about: "Vercel Sandbox through the Sandbox REST API (cmd + args, NDJSON logs, files as gzip'd tar)",
        config: VercelConfig,
        provider: VercelProvider,
    }
}

/// Vercel's lifecycle: create (`POST /v3/sandboxes`), connect by name (`GET
/// /v2/sandboxes/{name}?resume=true`), list (`GET /v2/sandboxes?project=&tags=`), destroy
/// (`DELETE /v2/sandboxes/{name}`). Memory follows the vCPUs (2048 MB each); there is no idle
/// timeout or disk size. State: filesystem snapshots that stop the sandbox, forks made of them,
/// routes for the ports declared at create.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        image: true,
        env: true,
        labels: true,
        lifetime: true,
        cpu: true,
        ..SpecSupport::NONE
    },
    options: &["name"],
    state: execseam_core::StateCapabilities {
        // "Once you create a snapshot, the sandbox shuts down automatically" and "Snapshots
        // expire after 30 days by default" (vercel.com/docs/sandbox/concepts/snapshots); the
        // files only (a new session boots from them).
        snapshot: Some(execseam_core::SnapshotSupport {
            source_after: execseam_core::SourceAfter::Stopped,
            ttl: true,
            default_ttl: Some(std::time::Duration::from_secs(30 * 24 * 3600)),
            // `SnapshotExpiration`: "Zero disables expiration" (vercel-sandbox 0.10.0).
            never_expires: true,
            ..execseam_core::SnapshotSupport::FILESYSTEM
        }),
        // Snapshot + create + delete (the core's default), so the fork has the source's files as
        // they are now; the service's own `POST /v2/sandboxes/{name}/fork` starts from the
        // source's last snapshot instead. The source is left stopped by the snapshot.
        fork: Some(execseam_core::ForkSupport {
            source_after: execseam_core::SourceAfter::Stopped,
            ..execseam_core::ForkSupport::SNAPSHOT_AND_CREATE
        }),
        // Routes: ports declared at create get a public URL each, `https://{subdomain}.vercel.run`
        // (the create/get answer's `routes`; the TS SDK's `domain(port)`); no token, no unexpose.
        expose: Some(execseam_core::ExposeSupport::DECLARED_AT_CREATE),
        ..execseam_core::StateCapabilities::NONE
    },
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// What this adapter does; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    binary_output: false,
    processes: Some(execseam_adapter_kit::spool::HYBRID),
    ..Capabilities::FULL
};
