#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Two gRPC services, as the official `modal==1.6.4` client speaks them (h2c to a local
//! emulator, TLS to Modal):
//!
//! - the **control plane** `modal.client.ModalClient` at `MODAL_SERVER_URL`
//!   (`x-modal-token-id`/`x-modal-token-secret` on every call, the short-lived JWT from
//!   `AuthTokenGet` as `x-modal-auth-token` on the V2 sandbox calls, one `x-idempotency-key`
//!   per logical call kept across its retries);
//! - the **task command router** `modal.task_command_router.TaskCommandRouter` of the
//!   sandbox's task, at the URL the control plane hands out with a router JWT
//!   (`authorization: Bearer …`), which runs the commands.
//!
//! The messages are generated at build time from the pinned wheel's own descriptors
//! (`proto/modal-1.6.4.binpb`, exported by `proto/export.py`; see [`wire`]).
//!
//! # Capabilities
//!
//! | | |
//! |---|---|
//! | argv | native: `TaskExecStartRequest.command_args`, no shell |
//! | workdir | native (`workdir`) |
//! | env | native (`secret_sources: [{env}]`, as the client sends `exec(env=)`) |
//! | stdin | native: `TaskExecStdinWrite` by offset, always closed with `eof` |
//! | streaming | yes: `TaskExecStdioRead` per stream, reopened from its byte offset after a transient failure |
//! | remote kill | **no**: Modal has no call that kills one command (nor has the client); [`ModalConfig::exec_timeout`] has Modal kill it (`timeout_secs`), destroying the sandbox ends everything |
//! | binary output | yes (`bytes`) |
//! | process handles | native ([`PROCESSES`]): the router's execs under a key-derived `exec_id`, output by offset, stdin by offset, exit by `TaskExecWait`; a registry directory in the sandbox for `fresh`, list and the group signal (see `process.rs`) |
//!
//! # Exit status
//!
//! `TaskExecWait` answers `code` or `signal`: a code is [`Exit::Code`](execseam_core::Exit),
//! a signal [`Exit::Signal`](execseam_core::Exit) (the client reports `128 + signal`). A SIGKILL
//! after [`ModalConfig::exec_timeout`] is Modal's kill at `timeout_secs`: `Err(Timeout(Command))`.
//! An answer with neither, or a stream that ends without its status, is an `Err`.
//!
//! # Errors
//!
//! See `docs/adapters/modal.md` (the module docs of `error.rs`): every gRPC status, Modal's
//! `RPCRetryPolicy` detail and the transport map to an [`ErrorKind`](execseam_core::ErrorKind)
//! and a [`Retry`](execseam_core::Retry).
#![warn(missing_docs)]

use execseam_adapter_kit::Var;
use execseam_core::{Capabilities, LifecycleCapabilities, SpecSupport};

mod client;
mod config;
mod error;
mod exec;
mod process;
mod provider;
mod wire;

pub use config::{
    DEFAULT_IMAGE, DEFAULT_IMAGE_BUILDER_VERSION, DEFAULT_SERVER_URL, MAX_LIFETIME, ModalConfig,
};
pub use exec::{ModalExec, is_v1_sandbox_id};
pub use process::{ModalProcesses, PROCESSES};
pub use provider::{ModalProvider, OPTIONS};

/// The largest command (argv and env) sent, checked before any I/O: Modal `execve`s the argv
/// in the container (128 KiB per string, 2 MiB less 256 KiB in all, the rest of `ARG_MAX` left to the
/// image's environment). The fallback: the first command over 64 KiB asks the container
/// (`size::ArgMax`: its `getconf ARG_MAX` less its environment) and is checked against that.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit =
    execseam_adapter_kit::size::SizeLimit::linux(
        execseam_adapter_kit::size::LINUX_DEFAULT_STACK,
        "execve in the Modal container: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
    );

/// The provider name in errors and reports.
pub const PROVIDER: &str = "modal";

/// The configuration variables [`ModalConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::text("MODAL_TOKEN_ID").required(),
    Var::secret("MODAL_TOKEN_SECRET").required(),
    Var::url("MODAL_SERVER_URL"),
    Var::text("MODAL_ENVIRONMENT"),
    Var::text("EXECSEAM_MODAL_APP"),
    Var::text("EXECSEAM_MODAL_IMAGE"),
    Var::seconds("EXECSEAM_MODAL_SANDBOX_TIMEOUT"),
    Var::exec_timeout("EXECSEAM_MODAL_EXEC_TIMEOUT"),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Modal {
        about: "Modal Sandboxes over gRPC: the control plane and the task command router",
        config: ModalConfig,
        provider: ModalProvider,
    }
}

/// Modal's lifecycle: create (`SandboxCreateV2`: image, env, tags, `timeout_secs`,
/// `idle_timeout_secs`, `Resources{milli_cpu, memory_mb}`; options `name`, `workdir`), connect
/// (`SandboxWaitV2` + `SandboxGetTaskIdV2` + `SandboxGetCommandRouterAccess`), list
/// (`SandboxListV2`, by tags), destroy (`SandboxTerminateV2`), filesystem snapshots ([`STATE`]).
/// No disk size: Modal refuses ephemeral disk for sandboxes.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        image: true,
        env: true,
        labels: true,
        lifetime: true,
        idle_timeout: true,
        cpu: true,
        memory: true,
        ..SpecSupport::NONE
    },
    options: OPTIONS,
    state: STATE,
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// How long a snapshot's image is kept when no ttl is asked for: the client's default
/// (`Sandbox.snapshot_filesystem(ttl=30 * 24 * 3600)`, modal 1.6.4 `sandbox/_sandbox.py`).
pub const SNAPSHOT_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// Modal's sandbox state: filesystem snapshots (`snapshot_filesystem` → an image; a sandbox
/// created from it; `ImageDelete`), forks made of them, and tunnels for the ports declared at
/// create (public, listed by `SandboxGetTunnelsV2`, never closed before the sandbox ends).
/// Memory snapshots (`_experimental_snapshot`) are not spoken; nothing lists images. No pause.
pub const STATE: execseam_core::StateCapabilities = execseam_core::StateCapabilities {
    snapshot: Some(execseam_core::SnapshotSupport {
        list: false,
        ttl: true,
        default_ttl: Some(SNAPSHOT_TTL),
        // `snapshot_filesystem(ttl=None)`: the image is kept until deleted (`ttl_seconds: -1`).
        never_expires: true,
        ..execseam_core::SnapshotSupport::FILESYSTEM
    }),
    fork: Some(execseam_core::ForkSupport::SNAPSHOT_AND_CREATE),
    expose: Some(execseam_core::ExposeSupport::DECLARED_AT_CREATE),
    ..execseam_core::StateCapabilities::NONE
};

/// What this adapter does; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    remote_kill: false,
    processes: Some(PROCESSES),
    ..Capabilities::FULL
};
