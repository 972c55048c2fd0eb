//! The adapters, through the `execseam` facade's registry: a provider per name, configured from
//! the environment, and the sandbox a command runs in ([`open`]), which the command closes
//! ([`close`]): a sandbox it created is destroyed, one it connected to is left running.

use std::sync::Arc;

use execseam::{AdapterInfo as Adapter, Capabilities, Error, Provider, Sandbox, SandboxSpec};

/// Every adapter compiled in.
pub fn all() -> Vec<Adapter> {
    execseam::adapters()
}

/// The adapter's capabilities as the environment configures it (its defaults if the
/// environment does not configure it).
pub fn capabilities(a: &Adapter) -> Capabilities {
    a.build(&|k: &str| std::env::var(k).ok())
        .map_or(a.capabilities, |p| p.capabilities())
}

/// The provider `name`, configured from the environment.
pub fn provider(name: &str) -> Result<Box<dyn Provider>, Error> {
    execseam::provider(name)
}

/// A sandbox to run in: `sandbox` when given (connected: [`close`] leaves it running), else a
/// new one (created: [`close`] destroys it).
pub async fn open(name: &str, sandbox: Option<&str>) -> Result<Arc<dyn Sandbox>, Error> {
    open_with(name, sandbox, SandboxSpec::new()).await
}

/// [`open`], creating from `spec` when no sandbox is given.
pub async fn open_with(
    name: &str,
    sandbox: Option<&str>,
    spec: SandboxSpec,
) -> Result<Arc<dyn Sandbox>, Error> {
    open_provider(provider(name)?, sandbox, spec).await
}

async fn open_provider(
    provider: Box<dyn Provider>,
    sandbox: Option<&str>,
    spec: SandboxSpec,
) -> Result<Arc<dyn Sandbox>, Error> {
    Ok(Arc::from(match sandbox.filter(|s| !s.is_empty()) {
        Some(id) => provider.connect(id).await?,
        // The facade's providers guard their creates (a lost answer's sandbox is destroyed,
        // issue 38, D17); the exit drains that.
        None => provider.create(spec).await?,
    }))
}

/// Closes what [`open`] gave: a created sandbox is destroyed, a connected one released. A
/// failure is reported on stderr, never hidden.
pub async fn close(sandbox: &dyn Sandbox) {
    if let Err(e) = sandbox.close().await {
        let what = if sandbox.owned() {
            "removing the sandbox this run created"
        } else {
            "releasing the sandbox"
        };
        eprintln!("execseam: {}: {what} failed: {e}", sandbox.provider());
    }
}
