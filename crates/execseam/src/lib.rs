#![doc = include_str!("../README.md")]
//!
//! # The registry
//!
//! A list of adapter types, one line each (each behind its cargo feature): every adapter crate
//! implements [`kit::Adapter`], which says its name, its variables, its capabilities and how its
//! provider is built from the variables, synchronously and without I/O; the registry needs
//! nothing else. The first I/O is the lifecycle call (`create`, `connect`, `list`, `destroy`) or
//! the first exec through a handle from `attach`.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

use std::collections::BTreeMap;

pub use execseam_core::*;
/// Host-side policy: deadline, output cap, retry (`execseam-layers`).
pub use execseam_layers as layers;
pub use execseam_layers::ExecExt;

/// For adapter authors: the [`Adapter`](kit::Adapter) trait every adapter implements, and the
/// plumbing they share (`execseam-adapter-kit`; less stable than the contract).
pub use execseam_adapter_kit as kit;
pub use execseam_adapter_kit::{Var, VarKind};

/// The registry: one line per adapter, `(module, "feature", adapter type)`. The feature is the
/// adapter's name ([`kit::Adapter::NAME`], checked by a test); everything else the registry
/// knows comes from the type.
macro_rules! registry {
    ($(($module:ident, $feature:literal, $krate:ident :: $ty:ident)),* $(,)?) => {
        $(
            #[cfg(feature = $feature)]
            pub use $krate as $module;
        )*

        /// Every adapter this crate knows, whether compiled in or not (the feature names).
        pub const KNOWN: &[&str] = &[$($feature),*];

        #[allow(clippy::vec_init_then_push)]
        fn compiled() -> Vec<AdapterInfo> {
            #[allow(unused_mut)]
            let mut v: Vec<AdapterInfo> = Vec::new();
            $(
                #[cfg(feature = $feature)]
                v.push(AdapterInfo::of::<$krate::$ty>());
            )*
            v
        }
    };
}

registry! {
    (local, "local", execseam_local::Local),
    (fly, "fly", execseam_fly::Fly),
    (sprites, "sprites", execseam_sprites::Sprites),
    (e2b, "e2b", execseam_e2b::E2b),
    (ax, "ax", execseam_ax::Ax),
    (cloudflare, "cloudflare", execseam_cloudflare::Cloudflare),
    (daytona, "daytona", execseam_daytona::Daytona),
    (docker, "docker", execseam_docker::Docker),
    (agentcore, "agentcore", execseam_agentcore::AgentCore),
    (modal, "modal", execseam_modal::Modal),
    (chrono, "chrono", execseam_chrono::Chrono),
    (vercel, "vercel", execseam_vercel::Vercel),
    (northflank, "northflank", execseam_northflank::Northflank),
    (kubernetes, "kubernetes", execseam_kubernetes::Kubernetes),
}

/// Reads one configuration variable (`None`: unset).
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One adapter compiled into this build: what its [`kit::Adapter`] implementation says.
#[derive(Clone, Copy)]
pub struct AdapterInfo {
    /// Its name (`"e2b"`): what [`provider`] takes.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// The variables its configuration reads (secrets are read, never printed).
    pub vars: &'static [Var],
    /// What its sandboxes do with the default configuration.
    pub capabilities: Capabilities,
    /// Which lifecycle operations it has with the default configuration.
    pub lifecycle: LifecycleCapabilities,
    build: fn(Vars<'_>) -> Result<Box<dyn Provider>, Error>,
}

impl AdapterInfo {
    /// The entry of adapter `A`.
    pub fn of<A: kit::Adapter>() -> AdapterInfo {
        AdapterInfo {
            name: A::NAME,
            about: A::ABOUT,
            vars: A::VARS,
            capabilities: A::CAPABILITIES,
            lifecycle: A::LIFECYCLE,
            // Every provider the registry builds runs its lifecycle calls in the layers'
            // `lifecycle` spans (a middleware: the contract crate has no tracing).
            // Its creates are guarded: a lost answer's sandbox is destroyed (issue 38, D17).
            build: |vars| {
                let guarded =
                    kit::guard::guard(A::NAME, A::LOST_CREATE, Box::new(A::provider_from(vars)?));
                Ok(execseam_layers::traced(guarded))
            },
        }
    }

    /// Builds its provider from `vars` (no I/O).
    pub fn build(&self, vars: Vars<'_>) -> Result<Box<dyn Provider>, Error> {
        (self.build)(vars)
    }

    /// The names of its variables.
    pub fn env(&self) -> Vec<&'static str> {
        self.vars.iter().map(|v| v.name).collect()
    }
}

impl std::fmt::Debug for AdapterInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterInfo")
            .field("name", &self.name)
            .field("lifecycle", &self.lifecycle)
            .finish_non_exhaustive()
    }
}

/// The adapters compiled into this build, in a fixed order (`local` first).
pub fn adapters() -> Vec<AdapterInfo> {
    compiled()
}

/// The adapter `name`, if compiled in. An unknown name, or one whose feature is off, is
/// [`InvalidConfig`](ErrorKind::InvalidConfig) saying which.
pub fn adapter(name: &str) -> Result<AdapterInfo, Error> {
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
    adapter(name)?.build(&kit::vars::env)
}

/// The provider `name`, configured from `vars` (the same names its environment variables
/// have: `E2B_API_KEY`, …) instead of the environment.
pub fn provider_from(
    name: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Box<dyn Provider>, Error> {
    adapter(name)?.build(&|k: &str| vars.get(k).cloned())
}
