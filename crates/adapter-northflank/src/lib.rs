#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Each command is one exec WebSocket (`/v1/command-exec/[teams/{t}/]projects/{p}/services/{id}`,
//! `ws(s)://` on the API host): the first frame is `init` with the API token and the context
//! (`command` as argv, `shell: "none"`, `encoding: "base64"`, `tty: false`), then stdin as
//! `payload` frames and `stdInEnd` (right behind `init` when there is no stdin, as the Python SDK
//! does; after the proxy's `init` reply otherwise), and the answer: `stdOut`/`stdErr` frames
//! (base64, so output is byte-exact) and the `completion` with `exitCode` (a number or, as the
//! proxy sends failures in practice, a numeric string).
//!
//! The protocol has no working directory and no environment: a command that sets either runs
//! through the exact `/bin/sh -c` wrapper of [`execseam_adapter_kit::degrade`] (a missing workdir is
//! `Err(NotFound)`). It has no kill either: dropping an exec closes the socket, and what the
//! proxy then does to the command is not documented (`remote_kill: false`). Nothing is
//! retried once the `init` frame is sent.
//!
//! Error mapping, the lifecycle (connect-only) and what is not verified:
//! `docs/adapters/northflank.md`.
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, Delivery, LifecycleCapabilities};

mod client;
mod config;
mod error;
mod exec;
mod provider;
mod wire;

pub use config::{DEFAULT_API_URL, DEFAULT_IDLE_TIMEOUT, NorthflankConfig};
pub use exec::{NorthflankExec, Target};
pub use provider::NorthflankProvider;

/// The provider name in errors and reports.
pub const PROVIDER: &str = "northflank";

/// The configuration variables [`NorthflankConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::secret("NORTHFLANK_API_TOKEN"),
    Var::secret("NF_API_TOKEN"),
    Var::url("NORTHFLANK_API_BASE_URL"),
    Var::url("NF_API_HOST"),
    Var::url("NF_HOST"),
    Var::text("NORTHFLANK_PROJECT_ID").required(),
    Var::text("NORTHFLANK_TEAM_ID"),
    Var::text("NORTHFLANK_INSTANCE"),
    Var::text("NORTHFLANK_CONTAINER"),
    Var::text("NORTHFLANK_USER"),
    Var::text("NORTHFLANK_GROUP"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Northflank {
        about: "Northflank services and jobs over the exec WebSocket (connect only: the service or job is the sandbox)",
        config: NorthflankConfig,
        provider: NorthflankProvider,
    }
}

/// Connect-only: exec targets an existing service or job (`GET …/services/{id}` checks it);
/// list gives the project's services; nothing is created or deleted.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    connect: true,
    list: true,
    ..LifecycleCapabilities::NONE
};

/// The largest command (argv and env) sent, checked before any I/O: Kubernetes exec
/// `execve`s the argv in the container (128 KiB per string, 2 MiB less 256 KiB in all, the rest of
/// `ARG_MAX` left to the container's environment). A command with env or a workdir travels as
/// one `/bin/sh -c` script, checked after quoting against the 128 KiB of one string. The
/// fallback: the first command over 64 KiB asks the container (`size::ArgMax`: its `getconf
/// ARG_MAX` less its environment) and is checked against that.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the Northflank container: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

/// What this adapter does; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    workdir: Delivery::ShellWrapped,
    env: Delivery::ShellWrapped,
    remote_kill: false,
    processes: Some(execseam_adapter_kit::spool::SPOOLED),
    ..Capabilities::FULL
};
