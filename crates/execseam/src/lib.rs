#![doc = include_str!("../README.md")]
//!
//! # The registry
//!
//! A plain table of constructors, one per adapter compiled in (each behind its cargo feature).
//! Every adapter is configured the same way, synchronously and without I/O, from named
//! variables (`<P>Config::from_vars`), so the registry needs nothing else; the first I/O is the
//! lifecycle call (`create`, `connect`, `list`, `destroy`).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

use std::collections::BTreeMap;

pub use execseam_core::*;
/// Host-side policy: deadline, output cap, retry (`execseam-layers`).
pub use execseam_layers as layers;
pub use execseam_layers::ExecExt;

#[cfg(feature = "agentcore")]
pub use execseam_agentcore as agentcore;
#[cfg(feature = "ax")]
pub use execseam_ax as ax;
#[cfg(feature = "chrono")]
pub use execseam_chrono as chrono;
#[cfg(feature = "cloudflare")]
pub use execseam_cloudflare as cloudflare;
#[cfg(feature = "daytona")]
pub use execseam_daytona as daytona;
#[cfg(feature = "docker")]
pub use execseam_docker as docker;
#[cfg(feature = "e2b")]
pub use execseam_e2b as e2b;
#[cfg(feature = "fly")]
pub use execseam_fly as fly;
#[cfg(feature = "local")]
pub use execseam_local as local;
#[cfg(feature = "modal")]
pub use execseam_modal as modal;
#[cfg(feature = "northflank")]
pub use execseam_northflank as northflank;
#[cfg(feature = "sprites")]
pub use execseam_sprites as sprites;
#[cfg(feature = "vercel")]
pub use execseam_vercel as vercel;

/// Reads one configuration variable (`None`: unset).
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One adapter compiled into this build.
#[derive(Clone, Copy)]
pub struct Adapter {
    /// Its name (`"e2b"`): what [`provider`] takes, the adapter's `PROVIDER`.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// The variables its configuration reads (secrets are read, never printed).
    pub env: &'static [&'static str],
    /// What its sandboxes do with the default configuration.
    pub capabilities: Capabilities,
    /// Which lifecycle operations it has.
    pub lifecycle: LifecycleCapabilities,
    build: fn(Vars<'_>) -> Result<Box<dyn Provider>, Error>,
}

impl Adapter {
    /// Builds its provider from `vars` (no I/O).
    pub fn build(&self, vars: Vars<'_>) -> Result<Box<dyn Provider>, Error> {
        (self.build)(vars)
    }
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("name", &self.name)
            .field("lifecycle", &self.lifecycle)
            .finish_non_exhaustive()
    }
}

/// Every adapter this crate knows, whether compiled in or not: `(name, feature)`.
pub const KNOWN: &[&str] = &[
    "local",
    "fly",
    "sprites",
    "e2b",
    "ax",
    "cloudflare",
    "daytona",
    "docker",
    "agentcore",
    "modal",
    "chrono",
    "vercel",
    "northflank",
];

macro_rules! boxed {
    ($e:expr) => {
        // Every provider the registry builds runs its lifecycle calls in the layers'
        // `lifecycle` spans (a middleware: the contract crate has no tracing).
        $e.map(|p| execseam_layers::traced(Box::new(p)))
    };
}

/// The adapters compiled into this build, in a fixed order (`local` first).
pub fn adapters() -> Vec<Adapter> {
    #[allow(unused_mut)]
    let mut v: Vec<Adapter> = Vec::new();
    #[cfg(feature = "local")]
    v.push(Adapter {
        name: execseam_local::PROVIDER,
        about: "runs commands on this host (the embedded default); sandboxes are private directories, not isolation",
        env: execseam_local::ENV_VARS,
        capabilities: execseam_local::CAPABILITIES,
        lifecycle: execseam_local::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_local::LocalProvider::new(
                execseam_local::LocalConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "fly")]
    v.push(Adapter {
        name: execseam_fly::PROVIDER,
        about: "Fly Machines through the Machines API exec endpoint (machines of one app are the sandboxes)",
        env: execseam_fly::ENV_VARS,
        capabilities: execseam_fly::CAPABILITIES,
        lifecycle: execseam_fly::LIFECYCLE,
        build: |vars| boxed!(execseam_fly::FlyProvider::new(execseam_fly::FlyConfig::from_vars(vars)?)),
    });
    #[cfg(feature = "sprites")]
    v.push(Adapter {
        name: execseam_sprites::PROVIDER,
        about: "Fly Sprites over the exec WebSocket (SPRITES_EXEC_TRANSPORT=http for the POST fallback)",
        env: execseam_sprites::ENV_VARS,
        capabilities: execseam_sprites::CAPABILITIES,
        lifecycle: execseam_sprites::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_sprites::SpritesProvider::new(
                execseam_sprites::SpritesConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "e2b")]
    v.push(Adapter {
        name: execseam_e2b::PROVIDER,
        about: "E2B sandboxes: control plane plus envd over Connect",
        env: execseam_e2b::ENV_VARS,
        capabilities: execseam_e2b::CAPABILITIES,
        lifecycle: execseam_e2b::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_e2b::E2bProvider::new(
                execseam_e2b::E2bConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "ax")]
    v.push(Adapter {
        name: execseam_ax::PROVIDER,
        about: "agent-substrate guest services as google/ax serves them (connect only: the guest's host:port is the sandbox id)",
        env: execseam_ax::ENV_VARS,
        capabilities: execseam_ax::CAPABILITIES,
        lifecycle: execseam_ax::LIFECYCLE,
        build: |vars| boxed!(execseam_ax::AxProvider::new(execseam_ax::AxConfig::from_vars(vars)?)),
    });
    #[cfg(feature = "cloudflare")]
    v.push(Adapter {
        name: execseam_cloudflare::PROVIDER,
        about: "Cloudflare Sandbox through the sandbox bridge Worker (EXECSEAM_CLOUDFLARE_MODE=exact for byte-exact output)",
        env: execseam_cloudflare::ENV_VARS,
        capabilities: execseam_cloudflare::CAPABILITIES,
        lifecycle: execseam_cloudflare::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_cloudflare::CloudflareProvider::new(
                execseam_cloudflare::CloudflareConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "daytona")]
    v.push(Adapter {
        name: execseam_daytona::PROVIDER,
        about: "Daytona sandboxes (each command in its own session)",
        env: execseam_daytona::ENV_VARS,
        capabilities: execseam_daytona::CAPABILITIES,
        lifecycle: execseam_daytona::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_daytona::DaytonaProvider::new(
                execseam_daytona::DaytonaConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "docker")]
    v.push(Adapter {
        name: execseam_docker::PROVIDER,
        about: "containers over the Docker Engine API, Docker or podman (EXECSEAM_DOCKER_MODE=warm: a long-lived container per sandbox; per-call: a fresh container per command)",
        env: execseam_docker::ENV_VARS,
        capabilities: execseam_docker::CAPABILITIES,
        lifecycle: execseam_docker::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_docker::DockerProvider::new(
                execseam_docker::DockerConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "agentcore")]
    v.push(Adapter {
        name: execseam_agentcore::PROVIDER,
        about: "AWS Bedrock AgentCore Code Interpreter (sessions are the sandboxes)",
        env: execseam_agentcore::ENV_VARS,
        capabilities: execseam_agentcore::CAPABILITIES,
        lifecycle: execseam_agentcore::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_agentcore::AgentCoreProvider::new(
                execseam_agentcore::AgentCoreConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "modal")]
    v.push(Adapter {
        name: execseam_modal::PROVIDER,
        about: "Modal Sandboxes over gRPC: the control plane and the task command router",
        env: execseam_modal::ENV_VARS,
        capabilities: execseam_modal::CAPABILITIES,
        lifecycle: execseam_modal::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_modal::ModalProvider::new(
                execseam_modal::ModalConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "chrono")]
    v.push(Adapter {
        name: execseam_chrono::PROVIDER,
        about: "Chrono Sandbox through POST /execute (CHRONO_DURABLE=1: the durable /executions contract)",
        env: execseam_chrono::ENV_VARS,
        capabilities: execseam_chrono::CAPABILITIES,
        lifecycle: execseam_chrono::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_chrono::ChronoProvider::new(
                execseam_chrono::ChronoConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "vercel")]
    v.push(Adapter {
        name: execseam_vercel::PROVIDER,
        about: "Vercel Sandbox through the Sandbox REST API (cmd + args, NDJSON logs, files as gzip'd tar)",
        env: execseam_vercel::ENV_VARS,
        capabilities: execseam_vercel::CAPABILITIES,
        lifecycle: execseam_vercel::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_vercel::VercelProvider::new(
                execseam_vercel::VercelConfig::from_vars(vars)?
            ))
        },
    });
    #[cfg(feature = "northflank")]
    v.push(Adapter {
        name: execseam_northflank::PROVIDER,
        about: "Northflank services and jobs over the exec WebSocket (connect only: the service or job is the sandbox)",
        env: execseam_northflank::ENV_VARS,
        capabilities: execseam_northflank::CAPABILITIES,
        lifecycle: execseam_northflank::LIFECYCLE,
        build: |vars| {
            boxed!(execseam_northflank::NorthflankProvider::new(
                execseam_northflank::NorthflankConfig::from_vars(vars)?
            ))
        },
    });
    v
}

/// The adapter `name`, if compiled in. An unknown name, or one whose feature is off, is
/// [`InvalidConfig`](ErrorKind::InvalidConfig) saying which.
pub fn adapter(name: &str) -> Result<Adapter, Error> {
    let all = adapters();
    if let Some(a) = all.iter().find(|a| a.name == name) {
        return Ok(*a);
    }
    let have: Vec<_> = all.iter().map(|a| a.name).collect();
    let message = if KNOWN.contains(&name) {
        format!(
            "adapter {name:?} is not compiled in: enable the `execseam` feature {name:?} (compiled in: {})",
            have.join(", ")
        )
    } else {
        format!("unknown adapter {name:?}; compiled in: {}", have.join(", "))
    };
    Err(Error::invalid_config(message))
}

/// The provider `name`, configured from this process's environment (no I/O yet).
pub fn provider(name: &str) -> Result<Box<dyn Provider>, Error> {
    adapter(name)?.build(&|k: &str| std::env::var(k).ok())
}

/// The provider `name`, configured from `vars` (the same names its environment variables
/// have: `E2B_API_KEY`, …) instead of the environment.
pub fn provider_from(
    name: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Box<dyn Provider>, Error> {
    adapter(name)?.build(&|k: &str| vars.get(k).cloned())
}
