#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! execseam's embedded default adapter: runs each [`Command`] on this host with `tokio::process`
//! (through `execseam-spawn`, the process runner it shares with the emulators' sandboxes).
//!
//! - **argv** is passed to `execve` exactly; there is no shell.
//! - **workdir** must exist: a missing one is `Err(NotFound)`, before anything is spawned.
//! - **env**: every command starts from an environment built from scratch, never the host's whole
//!   environment (so host credentials do not leak into commands): the variables named by
//!   [`LocalConfig::inherit`] (by default `PATH`, `HOME`, `USER`, `LOGNAME`, `LANG`, `TMPDIR`) are
//!   copied from this process when set, then [`LocalConfig::base_env`], then [`Command::env`] on
//!   top. `PATH` falls back to `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`.
//! - **stdin**: the command's bytes; empty stdin is `/dev/null` (immediate EOF), never inherited.
//! - **stdout and stderr** are drained concurrently, so neither pipe can fill and deadlock.
//! - Each command leads its own **process group**. Dropping the exec future or the event stream
//!   before the exit (a deadline, a cancel) SIGKILLs the whole group. After the command exits, its
//!   pipes are drained for at most [`LocalConfig::drain_timeout`] (a background child may hold
//!   them open); background processes are not killed after a normal exit.
//! - A program that cannot be found gives `Exit::Code(127)` and one that cannot be executed
//!   `Exit::Code(126)`, each with a message on stderr, as every POSIX shell (and every
//!   shell-wrapped backend) reports them. A signal death is `Exit::Signal(n)`.
//! - With a [`launcher`](LocalConfig::launcher) (the emulators use `unshare` to give each sandbox
//!   its own mount namespace), the command runs as `launcher… /bin/sh -c <wrapper>` and the
//!   workdir is entered by the wrapper inside the launcher's view of the filesystem. The wrapper
//!   marks its own failures with [`LAUNCHER_MARK`], so a command that an adapter wrapped itself
//!   keeps its own wrapper's failure as its output.
//! - With a [`spawner`](LocalConfig::spawner) (the emulators' sandboxes), the prepared process is
//!   started by the [`Spawner`] (inside the sandbox's namespaces, as its user), which also checks
//!   and enters the workdir; everything else (pipes, process group, kills, exit) is as above.
#![warn(missing_docs)]

mod config;
mod error;
mod exec;
mod provider;

use execseam_adapter_kit::Var;
use execseam_core::{
    Capabilities, ExposeSupport, ForkSupport, Kept, LifecycleCapabilities, PortAuth, PortsWhen,
    Scope, SnapshotSupport, SourceAfter, SpecSupport, StateCapabilities,
};

pub use config::LocalConfig;
pub use exec::LocalExec;
pub use execseam_spawn::{LAUNCHER_MARK, SpawnError, Spawner, restore_default_signals, size_limit};
pub use provider::LocalProvider;

/// What this adapter does without a launcher (with one, the workdir is shell-wrapped).
pub const CAPABILITIES: Capabilities = Capabilities {
    processes: Some(execseam_adapter_kit::spool::SPOOLED_TERMINAL),
    ..execseam_spawn::CAPABILITIES
};

/// Local sandboxes are directories (see [`LocalProvider`]): every operation, with env and labels.
/// A snapshot is a copy of the sandbox's working directory (not frozen: commands that write
/// while it is copied leave a mixed copy), a fork is a snapshot and a create from it, and an
/// exposed port is the host's own loopback address. No pause: local commands are host
/// processes with nothing to freeze them as a group.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        env: true,
        labels: true,
        ..SpecSupport::NONE
    },
    state: StateCapabilities {
        pause: None,
        snapshot: Some(SnapshotSupport {
            kinds: &[Kept::Filesystem],
            scope: Scope::Workdir,
            source_after: SourceAfter::Running,
            ..SnapshotSupport::FILESYSTEM
        }),
        fork: Some(ForkSupport::SNAPSHOT_AND_CREATE),
        expose: Some(ExposeSupport {
            when: PortsWhen::AnyTime,
            auth: PortAuth::None,
            list: false,
            unexpose: false,
            ports: (1, 65535),
            reserved: &[],
            only: None,
        }),
    },
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The configuration variables [`LocalConfig::from_env`] reads.
pub const VARS: &[Var] = &[Var::text("EXECSEAM_LOCAL_SANDBOX_ROOT")];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Local {
        about: "runs commands on this host (the embedded default); sandboxes are private directories, not isolation",
        config: LocalConfig,
        provider: LocalProvider,
    }

    fn capabilities(config: &LocalConfig) -> Capabilities {
        LocalExec::capabilities_of(config)
    }
}

/// The provider name in errors and reports.
pub const PROVIDER: &str = "local";
