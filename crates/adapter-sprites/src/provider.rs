//! [`SpritesProvider`]: sprites as sandboxes.

use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::sync::Arc;

use execseam_adapter_kit::id::random_id;
use execseam_adapter_kit::text::escape_path_segment;
use execseam_core::{
    Error, ErrorKind, ExposedPort, ListFilter, Ownership, Provider, Sandbox, SandboxInfo,
    SandboxSpec, SandboxState, Secret, SnapshotInfo, SnapshotOutcome, SnapshotRequest,
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
/// | [`snapshot`](Self::snapshot) | `POST /v1/sprites/{name}/checkpoint {"comment"}` (NDJSON), then `GET …/checkpoints` for its id | the writable filesystem, not memory; the sprite runs on |
/// | [`restore`](Self::restore) | `POST /v1/sprites/{name}/checkpoints/{id}/restore` (NDJSON) | in place: the files rewind, running processes stop |
/// | [`list_snapshots`](Self::list_snapshots) | `GET /v1/sprites/{name}/checkpoints` (of every sprite without a source) | newest first |
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

    execseam_adapter_kit::provider_config!(self => SpritesConfig: self.client.config());

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
        client.get_sprite("connect").await?;
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

    /// Checkpoints sprite `name` (the writable filesystem; the sprite runs on): the checkpoint's
    /// versioned id, which [`restore`](Self::restore) takes with the same sprite. The create
    /// answer carries no id, so the checkpoint is taken with a unique comment and found by it.
    pub async fn snapshot(
        &self,
        name: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        let kind = LIFECYCLE.state.check_snapshot(PROVIDER, &request)?;
        let client = self.client.for_sprite(name);
        let comment = format!("execseam-{}", random_id(12));
        let body = serde_json::json!({ "comment": comment }).to_string();
        client
            .checkpoint_stream("/checkpoint", Some(body), call("snapshot"))
            .await?;
        let taken = client
            .list_checkpoints()
            .await?
            .into_iter()
            .find(|c| c.comment == comment)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Protocol,
                    format!("the checkpoint {comment:?} was created but is not listed"),
                )
                .with_provider(PROVIDER)
                .with_operation("snapshot")
            })?;
        let info = SnapshotInfo::new(taken.id, kind).with_source(name);
        Ok(SnapshotOutcome::new(info, SandboxState::Running))
    }

    /// Restores sprite `name` in place from its checkpoint `snapshot`: its files rewind, its
    /// running processes stop. An unknown checkpoint is `NotFound`.
    pub async fn restore(&self, name: &str, snapshot: &str) -> Result<(), Error> {
        LIFECYCLE.state.check_restore(PROVIDER)?;
        if snapshot.is_empty() || snapshot.contains(['\0', '\n', '\r']) {
            return Err(
                Error::invalid_config(format!("{snapshot:?} is not a checkpoint id"))
                    .with_provider(PROVIDER)
                    .with_operation("restore"),
            );
        }
        let suffix = format!("/checkpoints/{}/restore", escape_path_segment(snapshot));
        self.client
            .for_sprite(name)
            .checkpoint_stream(&suffix, None, call("restore"))
            .await
    }

    /// The checkpoints of sprite `source`, or of every sprite; newest first per sprite.
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        LIFECYCLE.state.check_list_snapshots(PROVIDER)?;
        let names = match source {
            Some(n) => vec![n.to_owned()],
            None => self
                .client
                .list_sprites()
                .await?
                .into_iter()
                .map(|s| s.name)
                .collect(),
        };
        let mut out = Vec::new();
        for n in names {
            let cps = self.client.for_sprite(&n).list_checkpoints().await?;
            out.extend(cps.into_iter().map(|c| {
                let mut i =
                    SnapshotInfo::new(c.id, execseam_core::Kept::Filesystem).with_source(&n);
                if !c.comment.is_empty() {
                    i = i.with_name(c.comment);
                }
                i
            }));
        }
        Ok(out)
    }

    /// The URL of sprite `name` (`SpriteInfo.url`), which routes HTTP to port 8080, or to a
    /// running service's `http_port` when one is defined (see the crate's page): while a
    /// running service routes it to another port the URL does not reach `port`, and the answer
    /// is `Conflict` (retry once the service stops). With `url_settings.auth: sprite` (the
    /// default) the URL takes the API token, which the answer carries as its `Authorization`
    /// header; a `public` URL needs none.
    pub async fn expose(&self, name: &str, port: u16) -> Result<ExposedPort, Error> {
        LIFECYCLE.state.check_expose(PROVIDER, port)?;
        let client = self.client.for_sprite(name);
        let info = client.get_sprite("expose").await?;
        // (service, http_port) of each running service that routes the URL.
        let routed: Vec<(String, u16)> = client
            .list_services("expose")
            .await?
            .into_iter()
            .filter(|s| s.state.as_ref().and_then(|st| st.status.as_deref()) == Some("running"))
            .filter_map(|s| Some((s.name, s.http_port?)))
            .collect();
        if routed.iter().any(|&(_, p)| p != port) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "sprite {name}'s URL routes to the http_port of its running services {routed:?}, not to port {port}"
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("expose")
            .with_retry(execseam_core::Retry::SAFE));
        }
        let url = info.url.filter(|u| !u.is_empty()).ok_or_else(|| {
            Error::new(ErrorKind::Protocol, format!("sprite {name} has no url"))
                .with_provider(PROVIDER)
                .with_operation("expose")
        })?;
        let public = info
            .url_settings
            .and_then(|s| s.auth)
            .is_some_and(|a| a == "public");
        let exposed = ExposedPort::new(port, url);
        Ok(if public {
            exposed
        } else {
            exposed.with_header("Authorization", Secret::new(client.authorization()))
        })
    }

    /// Deletes sprite `name`; one that does not exist is `Ok(())`.
    pub async fn destroy(&self, name: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(name)?).await
    }
}

impl Provider for SpritesProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: SpritesExec::capabilities_of(self.config()),
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(
        SpritesProvider: create,
        connect,
        attach,
        list,
        destroy,
        snapshot,
        restore,
        list_snapshots,
        expose,
    );
}

const fn call(operation: &'static str) -> execseam_adapter_kit::retry::Call {
    execseam_adapter_kit::retry::Call::new(
        PROVIDER,
        operation,
        execseam_adapter_kit::retry::Stage::Submit,
    )
}
