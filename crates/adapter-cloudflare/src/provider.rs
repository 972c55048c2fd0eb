//! [`CloudflareProvider`]: the bridge's sandboxes.

use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::sync::Arc;

use execseam_adapter_kit::gone_is_destroyed;
use execseam_adapter_kit::host_snapshots::HostSnapshots;
use execseam_core::{
    Error, ErrorKind, ExposedPort, Ownership, Provider, SandboxSpec, SandboxState, SnapshotInfo,
    SnapshotOutcome, SnapshotRequest,
};

use crate::client::BridgeClient;
use crate::config::{CloudflareConfig, valid_sandbox_id};
use crate::exec::{CloudflareExec, with_backoff};
use crate::{LIFECYCLE, PROVIDER};

/// Creates, connects to and deletes sandboxes through the bridge Worker. Built without I/O.
///
/// | operation | bridge call |
/// |---|---|
/// | [`create`](Self::create) | `POST /v1/sandbox` (a fresh id), then the marker write that assigns a container |
/// | [`connect`](Self::connect) | `GET /v1/sandbox/{id}/running`: only a running sandbox has state to connect to; then the marker write |
/// | list | none: the bridge has no list route (`Unsupported`) |
/// | [`destroy`](Self::destroy) | `DELETE /v1/sandbox/{id}` (204, also for an id without a container) |
/// | [`expose`](Self::expose) | `POST /v1/sandbox/{id}/tunnel/{port}` | an ephemeral (quick) tunnel, `https://<random>.trycloudflare.com`: public, reused for the same port |
/// | [`unexpose`](Self::unexpose) | `DELETE /v1/sandbox/{id}/tunnel/{port}` | 204, also when there was none |
/// | exposed | none: the bridge has no tunnel list route (`Unsupported`) |
/// | [`snapshot`](Self::snapshot) | `GET /v1/sandbox/{id}/running`, then `POST /v1/sandbox/{id}/persist?excludes=.execseam`: a tar of `/workspace` (not the adapter's temp dir), kept as a file in [`CloudflareConfig::snapshot_dir`] |
/// | [`create`](Self::create) from a snapshot | the create above, then `POST /v1/sandbox/{id}/hydrate` with the tar |
/// | [`list_snapshots`](Self::list_snapshots), [`delete_snapshot`](Self::delete_snapshot) | none: the files in the snapshot directory |
#[derive(Clone, Debug)]
pub struct CloudflareProvider {
    client: BridgeClient,
}

impl CloudflareProvider {
    /// A provider with this configuration; what can be wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: CloudflareConfig) -> Result<CloudflareProvider, Error> {
        config.validate()?;
        Ok(CloudflareProvider {
            client: BridgeClient::new(Arc::new(config))?,
        })
    }

    execseam_adapter_kit::provider_config!(self => CloudflareConfig: self.client.config());

    /// Mints a sandbox id and assigns it a container; the handle owns it (close deletes it).
    /// From a snapshot ([`SandboxSpec::with_snapshot`]), the snapshot's tar is read first (one
    /// not kept here is `NotFound` before any request) and extracted into the new sandbox's
    /// `/workspace`.
    pub async fn create(&self, spec: SandboxSpec) -> Result<CloudflareExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let tar = match spec.snapshot() {
            Some(snap) => Some(self.snapshots("create")?.get(snap, "create").await?),
            None => None,
        };
        let attempts = self.config().connect_attempts;
        let id = with_backoff(attempts, || self.client.create_sandbox()).await?;
        let opened = async {
            let exec =
                CloudflareExec::open(self.client.clone(), id.clone(), Ownership::created()).await?;
            if let Some(tar) = tar {
                self.client.hydrate(&id, tar.into()).await?;
            }
            Ok(exec)
        };
        match opened.await {
            Ok(exec) => Ok(exec),
            Err(e) => {
                let _ = self.client.delete_sandbox(&id).await;
                Err(e)
            }
        }
    }

    /// The snapshot store, or `InvalidConfig` when no directory is configured or known.
    fn snapshots(&self, operation: &'static str) -> Result<HostSnapshots, Error> {
        let dir = self.config().snapshots_in().ok_or_else(|| {
            Error::invalid_config(
                "no snapshot directory: set EXECSEAM_CLOUDFLARE_SNAPSHOT_DIR (or CloudflareConfig::snapshot_dir), XDG_STATE_HOME or HOME",
            )
            .with_provider(PROVIDER)
            .with_operation(operation)
        })?;
        Ok(HostSnapshots::new(PROVIDER, "cf-snap-", dir))
    }

    /// Snapshots `/workspace` of the running sandbox `id` (the source runs on, not frozen:
    /// files written meanwhile may be half in the tar) into a file on this host. The adapter's
    /// temp dir (`/workspace/.execseam`) is left out.
    pub async fn snapshot(
        &self,
        id: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        // The request's refusals come first (a kind or option the bridge cannot honour), then
        // the id, then the store: all before any request.
        let kind = LIFECYCLE.state.check_snapshot(PROVIDER, &request)?;
        let id = checked_id(id, "snapshot")?;
        let store = self.snapshots("snapshot")?;
        if !self.client.running(&id).await? {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("sandbox {id:?} is not running (nothing to snapshot)"),
            )
            .with_provider(PROVIDER)
            .with_operation("snapshot"));
        }
        let exclude = crate::exec::TEMP_DIR.trim_start_matches("/workspace/");
        let tar = self.client.persist(&id, exclude).await?;
        let info = store.put(&id, kind, &tar).await?;
        Ok(SnapshotOutcome::new(info, SandboxState::Running))
    }

    /// The snapshots kept here, of sandbox `source` only when given.
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        LIFECYCLE.state.check_list_snapshots(PROVIDER)?;
        self.snapshots("list_snapshots")?.list(source).await
    }

    /// Deletes a snapshot's file; one that does not exist is `Ok(())`.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        LIFECYCLE.state.check_delete_snapshot(PROVIDER, snapshot)?;
        self.snapshots("delete_snapshot")?.delete(snapshot).await
    }

    /// Connects to the running sandbox `id`; not owned. A sandbox that is not running has no
    /// container (a Cloudflare sandbox id names one only while it runs): `NotFound`.
    pub async fn connect(&self, id: &str) -> Result<CloudflareExec, Error> {
        let missing = || {
            Error::new(
                ErrorKind::NotFound,
                format!("sandbox {id:?} is not running (no container to connect to)"),
            )
            .with_provider(PROVIDER)
            .with_operation("connect")
        };
        if !valid_sandbox_id(id) || !self.client.running(id).await? {
            return Err(missing());
        }
        CloudflareExec::open(self.client.clone(), id.to_owned(), Ownership::connected()).await
    }

    /// A handle on sandbox `id` without a request and without the marker check; not owned.
    pub fn attach(&self, id: &str) -> Result<CloudflareExec, Error> {
        Ok(CloudflareExec::from_parts(
            self.client.clone(),
            id.to_owned(),
            None,
            Ownership::connected(),
        ))
    }

    /// The public URL of `port` of sandbox `id`: the bridge's ephemeral tunnel for it (the one
    /// already open, or a new one). Ports 1024-65535 except 3000 (the bridge's control port);
    /// anything else is `InvalidConfig` before any request.
    pub async fn expose(&self, id: &str, port: u16) -> Result<ExposedPort, Error> {
        LIFECYCLE.state.check_expose(PROVIDER, port)?;
        let t = self.client.tunnel(&checked_id(id, "expose")?, port).await?;
        if t.port != port {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "asked to tunnel port {port}, the bridge answered a tunnel to {}",
                    t.port
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("expose"));
        }
        Ok(ExposedPort::new(port, t.url))
    }

    /// Closes the tunnel of `port` of sandbox `id`; none open is `Ok(())`.
    pub async fn unexpose(&self, id: &str, port: u16) -> Result<(), Error> {
        LIFECYCLE.state.check_unexpose(PROVIDER, port)?;
        self.client
            .delete_tunnel(&checked_id(id, "unexpose")?, port)
            .await
    }

    /// Deletes sandbox `id`; one without a container is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        if !valid_sandbox_id(id) {
            return Ok(());
        }
        gone_is_destroyed(self.client.delete_sandbox(id).await)
    }
}

impl Provider for CloudflareProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: CloudflareExec::capabilities_of(self.config()),
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(
        CloudflareProvider: create, connect, attach, destroy, expose, unexpose, snapshot, list_snapshots, delete_snapshot
    );
}

/// `id` if the bridge takes it as a sandbox id, else `InvalidConfig` (before any request).
fn checked_id(id: &str, operation: &'static str) -> Result<String, Error> {
    if valid_sandbox_id(id) {
        Ok(id.to_owned())
    } else {
        Err(
            Error::invalid_config(format!("{id:?} is not a Cloudflare sandbox id"))
                .with_provider(PROVIDER)
                .with_operation(operation),
        )
    }
}
