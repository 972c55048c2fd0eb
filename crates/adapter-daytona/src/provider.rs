//! [`DaytonaProvider`]: the control plane's sandbox lifecycle.

use execseam_adapter_kit::Checks as _;
use std::sync::Arc;

use execseam_core::{
    Error, LifecycleCapabilities, ListFilter, Ownership, Provider, Sandbox, SandboxInfo,
    SandboxSpec, SandboxState,
};

use crate::client::Client;
use crate::config::DaytonaConfig;
use crate::exec::DaytonaExec;
use crate::wire;
use crate::{LIFECYCLE, PROVIDER};

/// The label the SDKs set on every sandbox (the code toolbox's language).
const LANGUAGE_LABEL: &str = "code-toolbox-language";

/// Creates, connects to, lists and destroys Daytona sandboxes. Built without I/O.
///
/// | operation | Daytona call |
/// |---|---|
/// | [`create`](Self::create) | `POST /sandbox` (image → `snapshot`, env → `env`, labels → `labels`, idle timeout → `autoStopInterval` minutes), then `GET /sandbox/{id}` until `started` |
/// | [`connect`](Self::connect) | `GET /sandbox/{idOrName}`, waiting until `started` |
/// | [`list`](Self::list) | `GET /sandbox/paginated?labels=<JSON>`, every page |
/// | [`destroy`](Self::destroy) | `DELETE /sandbox/{id}` (404: already gone, `Ok`) |
/// | [`pause`](Self::pause) / [`resume`](Self::resume) | `POST /sandbox/{id}/stop` (after `autodelete/-1` for an ephemeral one) / `POST /sandbox/{id}/start` |
/// | [`snapshot`](Self::snapshot) | `POST /sandbox/{id}/snapshot {name}`, then `GET /snapshots/{name}` until active |
/// | [`list_snapshots`](Self::list_snapshots) / [`delete_snapshot`](Self::delete_snapshot) | `GET /snapshots`, every page / `GET /snapshots/{name}` then `DELETE /snapshots/{id}` |
/// | fork | snapshot, create from it (`snapshot: <name>`), delete the snapshot |
/// | [`expose`](Self::expose) | `GET /sandbox/{id}/ports/{port}/preview-url` |
///
/// What each keeps: [`STATE`](crate::STATE).
#[derive(Clone)]
pub struct DaytonaProvider {
    config: DaytonaConfig,
    client: Arc<Client>,
}

execseam_adapter_kit::debug_fields!(self => DaytonaProvider { config: self.config });

impl DaytonaProvider {
    /// A provider with this configuration; what can be wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: DaytonaConfig) -> Result<DaytonaProvider, Error> {
        config.validate()?;
        let client = Arc::new(Client::new(&config)?);
        Ok(DaytonaProvider { config, client })
    }

    execseam_adapter_kit::provider_config!(self => DaytonaConfig: &self.config);

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Creates a sandbox and waits until it is started; the handle owns it (close deletes it).
    pub async fn create(&self, spec: SandboxSpec) -> Result<DaytonaExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let mut labels = spec.labels().clone();
        labels
            .entry(LANGUAGE_LABEL.to_owned())
            .or_insert_with(|| "python".to_owned());
        // Daytona stops an idle sandbox after whole minutes; we created it, so once stopped it
        // is deleted at once.
        let idle = spec.idle_timeout().map_or(15, |d| {
            d.as_secs().div_ceil(60).clamp(1, u64::from(u32::MAX)) as u32
        });
        let body = wire::CreateSandbox {
            env: spec.env().clone(),
            labels,
            // `check` refused an image with a snapshot: a Daytona snapshot is both.
            snapshot: spec
                .snapshot()
                .or(spec.image())
                .map(str::to_owned)
                .or_else(|| self.config.snapshot.clone()),
            target: self.config.target.clone(),
            auto_stop_interval: Some(idle),
            auto_delete_interval: Some(0),
            ..Default::default()
        };
        let sandbox = self.client.create_sandbox(&body).await?;
        DaytonaExec::open(
            self.client.clone(),
            &self.config,
            sandbox,
            Ownership::created(),
        )
        .await
    }

    /// Connects to an existing sandbox (by id or name), waiting until it is started; the handle
    /// does not own it.
    pub async fn connect(&self, id: &str) -> Result<DaytonaExec, Error> {
        let sandbox = self.client.get_sandbox(id).await?;
        DaytonaExec::open(
            self.client.clone(),
            &self.config,
            sandbox,
            Ownership::connected(),
        )
        .await
    }

    /// A handle on sandbox `id` without a request; not owned. Its toolbox is reached through
    /// [`DaytonaConfig::toolbox_url`] when set, else through the proxy URL the API names on first
    /// use (`GET /sandbox/{id}/toolbox-proxy-url`).
    pub fn attach(&self, id: &str) -> Result<DaytonaExec, Error> {
        Ok(DaytonaExec::from_parts(
            self.client.clone(),
            &self.config,
            self.config.toolbox_url.as_deref(),
            id,
            Ownership::connected(),
        ))
    }

    /// Lists the sandboxes `filter` selects (the API filters on labels).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let listed = self.client.list_sandboxes(filter.labels()).await?;
        Ok(listed
            .into_iter()
            .map(|s| {
                let state = match s.state.as_deref() {
                    Some("started") => SandboxState::Running,
                    Some("creating" | "starting" | "pending_build" | "building_snapshot") => {
                        SandboxState::Starting
                    }
                    // A snapshotting sandbox runs on (the runner commits it without pausing).
                    Some("snapshotting" | "forking") => SandboxState::Running,
                    Some("stopped" | "stopping") => SandboxState::Stopped,
                    // Files moved to object storage; start brings it back (slowly).
                    Some("archived" | "archiving") => SandboxState::Archived,
                    // A linux-vm/windows sandbox's own pause: memory kept.
                    Some("paused" | "pausing" | "resuming") => SandboxState::Paused,
                    _ => SandboxState::Unknown,
                };
                let mut info = SandboxInfo::new(s.id)
                    .with_labels(s.labels)
                    .with_state(state);
                if let Some(snapshot) = s.snapshot {
                    info = info.with_image(snapshot);
                }
                info
            })
            .filter(|i| filter.matches(i))
            .collect())
    }

    /// Deletes a sandbox (`DELETE /sandbox/{id}`); one that does not exist is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(id)?).await
    }
}

impl Provider for DaytonaProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: crate::capabilities_of(self.config.terminal),
    );

    fn lifecycle(&self) -> LifecycleCapabilities {
        LifecycleCapabilities {
            state: crate::state::state_with(self.config.signed_previews),
            ..LIFECYCLE
        }
    }

    execseam_adapter_kit::forward_lifecycle!(
        DaytonaProvider: create, connect, attach, list, destroy, pause, resume, snapshot, list_snapshots, delete_snapshot, expose
    );
}
