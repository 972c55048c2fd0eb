#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! execseam adapter for [Kubernetes](https://kubernetes.io): every command is a `pods/exec`
//! through the API server, over WebSocket (`v5.channel.k8s.io`, or `v4.channel.k8s.io` where the
//! server offers only that); sandboxes are [kubernetes-sigs/agent-sandbox] resources or plain
//! pods.
//!
//! [kubernetes-sigs/agent-sandbox]: https://github.com/kubernetes-sigs/agent-sandbox
//!
//! # Capabilities
//!
//! | | |
//! |---|---|
//! | argv | native: one `command` query parameter per element (behind `env EXECSEAM_EXEC=<tag>` while remote kill is on) |
//! | stdin | native on v5: channel 0, then the close signal `[255, 0]`; on v4, which cannot close stdin, a `/bin/sh` wrapper stores exactly its length (`head -c`) and runs the command on that file |
//! | workdir | shell-wrapped (`cd` in a `/bin/sh -c` wrapper); a missing one is `Err(NotFound)` |
//! | env | shell-wrapped, the values on the first line of stdin, never in the URL |
//! | streaming | yes: channel 1 and 2 frames as they come |
//! | remote kill | yes: a second exec kills every process carrying the command's tag (the API server does not kill a command whose stream closed) |
//! | binary output | yes |
//! | process handles | yes: [`Processes`](execseam_core::Processes) from the adapter kit's spool, output and exit in files in the pod's `/tmp` (pod exec has no detach or reattach; a detached command outlives the exec that started it, not the container) |
//! | terminals | the kit's recorder (`script(1)` in the pod) by default; the API server's `tty=true` exec with its resize channel where the image has no `script` ([`TerminalMode::Auto`]), or always ([`TerminalMode::Attached`]): then not reattachable |
//!
//! # Exit status
//!
//! Channel 3 carries a `metav1.Status` once, before the server closes: `Success` is exit 0,
//! `NonZeroExitCode` carries the code in its `ExitCode` cause. Any other status (`InternalError`:
//! the runtime could not start the command, the container went away), a socket that closes
//! without a status, or one that cannot be read, is an `Err`, never an exit code.
//!
//! # Errors
//!
//! See `error.rs` (rendered in `docs/adapters/kubernetes.md`).
#![warn(missing_docs)]

use execseam_adapter_kit::{Var, Vars};
use execseam_core::{Capabilities, Delivery, LifecycleCapabilities, SpecSupport};

mod channel;
mod client;
mod config;
mod error;
mod exec;
mod lifecycle;
mod names;
mod provider;
mod sandboxd;
mod script;
mod terminal;
mod wire;

pub use channel::Protocol;
pub use config::{ExecPath, KubernetesConfig, Mode, TerminalMode};
pub use exec::KubernetesExec;
pub use provider::KubernetesProvider;
pub use script::EXEC_TAG_VAR;

/// The provider name in errors and reports.
pub const PROVIDER: &str = "kubernetes";

/// The configuration variables [`KubernetesConfig::from_env`] reads.
pub const VARS: &[Var] = &[
    Var::text("EXECSEAM_KUBERNETES_KUBECONFIG"),
    Var::text("EXECSEAM_KUBERNETES_CONTEXT"),
    Var::url("EXECSEAM_KUBERNETES_SERVER"),
    Var::secret("EXECSEAM_KUBERNETES_TOKEN"),
    Var::text("EXECSEAM_KUBERNETES_CA_CERT"),
    Var::flag("EXECSEAM_KUBERNETES_INSECURE"),
    Var::text("EXECSEAM_KUBERNETES_NAMESPACE"),
    Var::choice("EXECSEAM_KUBERNETES_MODE", &["claim", "sandbox", "pod"]),
    Var::text("EXECSEAM_KUBERNETES_WARM_POOL"),
    Var::text("EXECSEAM_KUBERNETES_TEMPLATE"),
    Var::text("EXECSEAM_KUBERNETES_POD_TEMPLATE"),
    Var::text("EXECSEAM_KUBERNETES_IMAGE"),
    Var::text("EXECSEAM_KUBERNETES_CONTAINER"),
    Var::seconds("EXECSEAM_KUBERNETES_READY_TIMEOUT"),
    Var::seconds("EXECSEAM_KUBERNETES_REQUEST_TIMEOUT"),
    Var::seconds("EXECSEAM_KUBERNETES_IDLE_TIMEOUT"),
    Var::text("EXECSEAM_KUBERNETES_TEMP_DIR"),
    Var::flag("EXECSEAM_KUBERNETES_REMOTE_KILL"),
    Var::choice("EXECSEAM_KUBERNETES_TERMINAL", TerminalMode::WORDS),
    Var::choice("EXECSEAM_KUBERNETES_EXEC", &["pods-exec", "sandboxd"]),
];

execseam_adapter_kit::adapter! {
    /// The adapter (see [`Adapter`](execseam_adapter_kit::Adapter)): what the `execseam` facade's registry lists.
    pub struct Kubernetes {
        about: "Kubernetes: pod exec over the API server's WebSocket; agent-sandbox claims, sandboxes or plain pods",
        config: KubernetesConfig => |vars: &Vars<'_>| KubernetesConfig::from_vars(|k| vars.get(k)),
        provider: KubernetesProvider,
    }

    fn capabilities(config: &KubernetesConfig) -> Capabilities {
        capabilities_of(config)
    }

    fn lifecycle(config: &KubernetesConfig) -> LifecycleCapabilities {
        lifecycle_of(config)
    }
}

/// The lifecycle in claim mode (the default): create (`SandboxClaim` on a warm pool: image →
/// the pool, env → `spec.env`, labels, lifetime → `spec.lifecycle.shutdownTime`), connect, list
/// (by label), destroy, pause and resume ([`STATE`]).
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

/// Claim and sandbox modes: pause is agent-sandbox's suspend, `spec.operatingMode: Suspended`
/// on the Sandbox, and resume sets it back to `Running`. The controller deletes the Sandbox's
/// pod and keeps the Sandbox, its name, its Service and its PersistentVolumeClaims
/// (`controllers/sandbox_controller.go`, `reconcilePod`: "Deleting Pod because
/// .Spec.OperatingMode is Suspended"; `reconcilePVCs` runs in either mode); resume makes a new
/// pod under the same name, with a new IP. So a pause keeps only what is on the template's
/// volumes (`volumeClaimTemplates`): the container's writable layer, its memory and its
/// processes (process handles included) are gone. A command on a suspended sandbox is
/// `Conflict` with the state `Paused` (it has no pod); connect does not resume. No snapshots,
/// forks or exposed ports (`Unsupported` before any request).
pub const STATE: execseam_core::StateCapabilities = execseam_core::StateCapabilities {
    pause: Some(execseam_core::PauseSupport {
        kinds: &[execseam_core::Kept::Filesystem],
        scope: execseam_core::Scope::Volumes,
        while_paused: execseam_core::WhilePaused::Refused,
        connect_resumes: false,
    }),
    ..execseam_core::StateCapabilities::NONE
};

/// Pod mode's lifecycle: image, env, labels, CPU and memory (requests = limits); no lifetime.
pub const POD_LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    spec: SpecSupport {
        image: true,
        env: true,
        labels: true,
        cpu: true,
        memory: true,
        ..SpecSupport::NONE
    },
    // A plain pod has no operating mode: deleting it is destroying it.
    state: execseam_core::StateCapabilities::NONE,
    ..LIFECYCLE
};

pub(crate) fn lifecycle_of(config: &KubernetesConfig) -> LifecycleCapabilities {
    match config.mode {
        Mode::Pod => POD_LIFECYCLE,
        Mode::Claim | Mode::Sandbox => LIFECYCLE,
    }
}

/// The largest command: the argv the container `execve`s (Linux: 128 KiB per string, 2 MiB in
/// all, some of it the container's environment). The exec URL is checked too (1 MiB,
/// percent-encoded). The fallback: the first command over 64 KiB asks the pod (`size::ArgMax`:
/// its `getconf ARG_MAX` less its environment) and is checked against that, the wrapped form
/// too.
pub const SIZE_LIMIT: execseam_adapter_kit::size::SizeLimit = execseam_adapter_kit::size::CONTAINER;

/// What this adapter does by default; see the [crate docs](crate).
pub const CAPABILITIES: Capabilities = Capabilities {
    workdir: Delivery::ShellWrapped,
    env: Delivery::ShellWrapped,
    processes: Some(execseam_adapter_kit::spool::SPOOLED_TERMINAL),
    ..Capabilities::FULL
};

pub(crate) fn capabilities_of(config: &KubernetesConfig) -> Capabilities {
    let processes = Some(
        config
            .terminal
            .capabilities(execseam_adapter_kit::spool::SPOOLED),
    );
    match config.exec_path {
        ExecPath::PodsExec => Capabilities {
            remote_kill: config.remote_kill,
            processes,
            ..CAPABILITIES
        },
        // `ProcessConfig.env_vars`; the kill is `SendSignal(SIGKILL)` to the group.
        ExecPath::Sandboxd => Capabilities {
            env: Delivery::Native,
            remote_kill: true,
            processes,
            ..CAPABILITIES
        },
    }
}
