//! Every adapter the CLI knows: its name, capabilities, configuration and how to connect.
//!
//! Each adapter crate provides its capabilities and a `from_env` constructor; this table is the
//! only place the CLI names them.

use std::sync::Arc;

use execseam_core::{BoxFuture, Capabilities, Error, Exec};

/// One adapter.
pub struct Adapter {
    /// `--adapter` name.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// Environment variables read by `from_env` (secrets are read, never printed).
    pub env: &'static [&'static str],
    /// Its capabilities (as configured by default).
    pub capabilities: fn() -> Capabilities,
    /// Connects using the environment.
    pub connect: fn() -> BoxFuture<'static, Result<Arc<dyn Exec>, Error>>,
}

pub fn all() -> Vec<Adapter> {
    vec![
        Adapter {
            name: "local",
            about: "runs commands on this host (the embedded default)",
            env: &[],
            capabilities: || execseam_local::LocalExec::new().capabilities(),
            connect: || {
                Box::pin(async { Ok(Arc::new(execseam_local::LocalExec::new()) as Arc<dyn Exec>) })
            },
        },
        // @adapters: each adapter adds one entry here.
    ]
}

pub fn find(name: &str) -> Result<Adapter, String> {
    let all = all();
    let names: Vec<_> = all.iter().map(|a| a.name).collect();
    all.into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| format!("unknown adapter {name:?}; known: {}", names.join(", ")))
}
