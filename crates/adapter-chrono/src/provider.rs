//! [`ChronoProvider`]: Chrono's (small) lifecycle.

use execseam_adapter_kit::Checks as _;
use execseam_core::{Error, Provider, SandboxSpec};

use crate::config::ChronoConfig;
use crate::exec::ChronoExec;
use crate::{LIFECYCLE, PROVIDER};

/// Makes [`ChronoExec`] handles. Chrono runs every execution in a fresh sandbox that is removed
/// when it ends, so nothing can be connected to, listed or destroyed:
///
/// | operation | Chrono call | notes |
/// |---|---|---|
/// | [`create`](Self::create) | none | a handle on the service; no spec field applies |
/// | connect, list, destroy | none | `Unsupported` (nothing outlives an execution) |
#[derive(Clone, Debug)]
pub struct ChronoProvider {
    config: ChronoConfig,
}

impl ChronoProvider {
    /// A provider with this configuration (checked: `InvalidConfig`); no I/O.
    pub fn new(config: ChronoConfig) -> Result<ChronoProvider, Error> {
        config.validate()?;
        Ok(ChronoProvider { config })
    }

    execseam_adapter_kit::provider_config!(self => ChronoConfig: &self.config);

    /// A handle on the service (owned; closing it removes nothing, since nothing persists).
    pub async fn create(&self, spec: SandboxSpec) -> Result<ChronoExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        ChronoExec::new(self.config.clone())
    }
}

impl Provider for ChronoProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: ChronoExec::capabilities_of(&self.config),
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(ChronoProvider: create);
}
