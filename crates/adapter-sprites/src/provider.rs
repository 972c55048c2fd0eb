//! [`SpritesProvider`]: sprites as sandboxes.

use std::sync::Arc;

use execseam_adapter_kit::id::random_id;
use execseam_core::{
    BoxFuture, Capabilities, Error, LifecycleCapabilities, ListFilter, Ownership, Provider,
    Sandbox, SandboxInfo, SandboxSpec, SandboxState,
};

use crate::client::Client;
use crate::config::SpritesConfig;
use crate::exec::SpritesExec;
use crate::{LIFECYCLE, PROVIDER};

/// Creates, connects to, lists and deletes sprites. Built without I/O.
///
/// | operation | Sprites API call |
/// |---|---|
/// | [`create`](Self::create) | `POST /v1/sprites {"name"}`, the name `execseam-<random>` unless the spec's `name` option gives one |
/// | [`connect`](Self::connect) | `GET /v1/sprites/{name}` |
/// | [`list`](Self::list) | `GET /v1/sprites`, every page (`continuation_token`) |
/// | [`destroy`](Self::destroy) | `DELETE /v1/sprites/{name}` (404: already gone, `Ok`) |
#[derive(Clone, Debug)]
pub struct SpritesProvider {
    client: Client,
}

impl SpritesProvider {
    /// A provider with this configuration; what can be wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: SpritesConfig) -> Result<SpritesProvider, Error> {
        config.validate()?;
        Ok(SpritesProvider {
            client: Client::new(Arc::new(config))?,
        })
    }

    /// [`SpritesConfig::from_env`], then [`new`](Self::new).
    pub fn from_env() -> Result<SpritesProvider, Error> {
        SpritesProvider::new(SpritesConfig::from_env()?)
    }

    /// The configuration.
    pub fn config(&self) -> &SpritesConfig {
        self.client.config()
    }

    /// Creates a sprite; the handle owns it (close deletes it). The option `name` names it.
    pub async fn create(&self, spec: SandboxSpec) -> Result<SpritesExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let name = match spec.options().get("name") {
            Some(n) => n.clone(),
            None => format!("execseam-{}", random_id(12)),
        };
        let client = self.client.for_sprite(&name);
        client.create_sprite(&name).await?;
        Ok(SpritesExec::new(client, Ownership::created()))
    }

    /// Connects to sprite `name` (`NotFound` if there is none); not owned.
    pub async fn connect(&self, name: &str) -> Result<SpritesExec, Error> {
        let client = self.client.for_sprite(name);
        client.get_sprite().await?;
        Ok(SpritesExec::new(client, Ownership::connected()))
    }

    /// A handle on sprite `name` without a request; not owned.
    pub fn attach(&self, name: &str) -> Result<SpritesExec, Error> {
        Ok(SpritesExec::new(
            self.client.for_sprite(name),
            Ownership::connected(),
        ))
    }

    /// Lists the sprites (Sprites have no labels: a filter with labels is `Unsupported`).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let sprites = self.client.list_sprites().await?;
        Ok(sprites
            .into_iter()
            .map(|s| {
                let state = match s.status.as_deref() {
                    Some("running") => SandboxState::Running,
                    Some("warm" | "cold") => SandboxState::Paused,
                    _ => SandboxState::Unknown,
                };
                SandboxInfo::new(s.name).with_state(state)
            })
            .collect())
    }

    /// Deletes sprite `name`; one that does not exist is `Ok(())`.
    pub async fn destroy(&self, name: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(name)?).await
    }
}

impl Provider for SpritesProvider {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        SpritesExec::capabilities_of(self.config())
    }

    fn lifecycle(&self) -> LifecycleCapabilities {
        LIFECYCLE
    }

    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move { Ok(Box::new(SpritesProvider::create(self, spec).await?) as _) })
    }

    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move { Ok(Box::new(SpritesProvider::connect(self, id).await?) as _) })
    }

    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        Ok(Box::new(SpritesProvider::attach(self, id)?))
    }

    fn list<'a>(
        &'a self,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
        Box::pin(SpritesProvider::list(self, filter))
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(SpritesProvider::destroy(self, id))
    }
}
