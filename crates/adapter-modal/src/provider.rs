//! [`ModalProvider`]: the sandbox lifecycle on Modal's control plane.

use execseam_adapter_kit::vars;
use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use execseam_core::{
    Error, ErrorKind, ExposedPort, ListFilter, Provider, Retry, SandboxInfo, SandboxSpec,
    SandboxState, SnapshotInfo, SnapshotOutcome, SnapshotRequest,
};

use crate::client::{Control, Create};
use crate::config::{ModalConfig, check_image, check_lifetime};
use crate::error::{from_status, protocol};
use crate::exec::{ModalExec, is_v1_sandbox_id};
use crate::wire::api;
use crate::{CAPABILITIES, LIFECYCLE, PROVIDER, SNAPSHOT_TTL};

/// How long the service may take to have a sandbox's tunnels ready: the client's default
/// (`Sandbox.tunnels(timeout=50)`, modal 1.6.4 `sandbox/_sandbox.py`), within the request timeout.
const TUNNELS_WAIT: Duration = Duration::from_secs(50);
use execseam_adapter_kit::retry::Stage;

/// Creates, connects to, lists and destroys Modal sandboxes. Built without I/O; cheap to clone
/// (one HTTP/2 connection, shared with the sandboxes' router calls when the router is served at
/// the same URL).
///
/// | operation | Modal calls | notes |
/// |---|---|---|
/// | [`create`](Self::create) | `AppGetOrCreate`, `ImageGetOrCreate` (+ `ImageJoinStreaming`), `AuthTokenGet`, `SandboxCreateV2` | image → `Image.from_registry(tag)` or an `im-…` id, env → `secret_sources` env, labels → tags, lifetime → `timeout_secs`, idle timeout → `idle_timeout_secs`, CPU → `milli_cpu`, memory → `memory_mb` (MiB, as the client's `memory=`); options `name`, `workdir` |
/// | [`connect`](Self::connect) | `SandboxWaitV2{timeout: 0}`, `SandboxGetTaskIdV2`, `SandboxGetCommandRouterAccess` | a V1-shaped id uses the V1 RPCs; a finished sandbox is `NotFound` |
/// | [`list`](Self::list) | `SandboxListV2` (every page, newest first, by `before_timestamp`) | the environment's running sandboxes, filtered by tags on the server |
/// | [`destroy`](Self::destroy) | `SandboxTerminateV2` | every command in it ends; a sandbox that is gone is `Ok` |
/// | [`snapshot`](Self::snapshot) | `TaskSnapshotFilesystem` on the task router (the client's `snapshot_filesystem`) | the filesystem as an image id (`im-…`), kept for the ttl (default 30 days, the client's); the sandbox runs on |
/// | create from a snapshot | `SandboxCreateV2` with `image_id` = the snapshot | a deleted or expired image is `NotFound` |
/// | [`delete_snapshot`](Self::delete_snapshot) | `ImageDelete` (`modal.experimental.image_delete`) | gone already is `Ok` |
/// | fork | snapshot, create from it, delete the image | the files only; fork and source share nothing |
#[derive(Clone, Debug)]
pub struct ModalProvider {
    config: Arc<ModalConfig>,
    control: Arc<Control>,
}

/// The provider-specific spec options [`ModalProvider::create`] accepts.
pub const OPTIONS: &[&str] = &["name", "workdir"];

impl ModalProvider {
    /// A provider with this configuration. A bad URL, an empty token or an impossible default is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: ModalConfig) -> Result<ModalProvider, Error> {
        config.validate()?;
        let config = Arc::new(config);
        let control = Control::new(config.clone())
            .map(Arc::new)
            .map_err(|s| vars::config_error(PROVIDER, s.message().to_owned()))?;
        Ok(ModalProvider { config, control })
    }

    execseam_adapter_kit::provider_config!(self => ModalConfig: &self.config);

    /// Creates a sandbox; the handle owns it (close terminates it). Retried creating calls
    /// carry their first idempotency key, so an answer lost on the way does not make a second
    /// sandbox.
    pub async fn create(&self, spec: SandboxSpec) -> Result<ModalExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let c = &self.config;
        let image = spec.image().unwrap_or(&c.image).to_owned();
        check_image(&image)?;
        let lifetime = spec.lifetime().unwrap_or(c.sandbox_timeout);
        check_lifetime("the lifetime", lifetime)?;
        let workdir = match spec.options().get("workdir") {
            Some(w) if !w.starts_with('/') => {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("option workdir {w:?} must be an absolute path"),
                ));
            }
            Some(w) => Some(w.clone()),
            None => c.workdir.clone(),
        };
        let idle = spec.idle_timeout().or(c.idle_timeout);
        let secs = |d: Duration| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX);
        let resources =
            (spec.cpu_millis().is_some() || spec.memory_mib().is_some()).then(|| api::Resources {
                milli_cpu: spec.cpu_millis().unwrap_or(0),
                memory_mb: spec
                    .memory_mib()
                    .map_or(0, |m| u32::try_from(m).unwrap_or(u32::MAX)),
                ..Default::default()
            });
        let map = |s| from_status(s, "create", Stage::Submit);
        let control = &self.control;
        let app_id = control.app().await.map_err(map)?;
        // A filesystem snapshot is an image id: the sandbox starts from it as is.
        let image_id = match spec.snapshot() {
            Some(snapshot) => snapshot.to_owned(),
            None => control.image(&app_id, &image).await.map_err(map)?,
        };
        let definition = api::Sandbox {
            image_id,
            timeout_secs: secs(lifetime),
            idle_timeout_secs: idle.map(secs),
            workdir,
            resources,
            name: spec.options().get("name").cloned(),
            network_access: Some(api::NetworkAccess {
                network_access_type: api::network_access::NetworkAccessType::Open as i32,
                ..Default::default()
            }),
            // `Sandbox.create(unencrypted_ports=)` (modal 1.6.4 `sandbox/_common.py`
            // `open_port_specs`): a TLS endpoint and a raw TCP socket each; `expose` answers the
            // socket's `http://` URL.
            open_ports_oneof: (!spec.ports().is_empty()).then(|| {
                api::sandbox::OpenPortsOneof::OpenPorts(api::PortSpecs {
                    ports: spec
                        .ports()
                        .iter()
                        .map(|&port| api::PortSpec {
                            port: u32::from(port),
                            unencrypted: true,
                            tunnel_type: None,
                        })
                        .collect(),
                })
            }),
            ..Default::default()
        };
        let mut env = c.sandbox_env.exposed();
        env.extend(spec.env().clone());
        let mut tags = c.tags.clone();
        tags.extend(spec.labels().clone());
        let created = control
            .create_sandbox(Create {
                app_id,
                definition,
                env: env.into_iter().collect(),
                tags: tags.into_iter().collect(),
            })
            .await
            .map_err(map)?;
        if created.sandbox_id.is_empty() {
            return Err(protocol("create", "SandboxCreateV2 returned no sandbox_id"));
        }
        tracing::debug!(provider = PROVIDER, sandbox = %created.sandbox_id, "created");
        Ok(ModalExec::created(
            self.config.clone(),
            self.control.clone(),
            created,
        ))
    }

    /// Connects to a running sandbox by id; the handle does not own it. A sandbox that does not
    /// exist, or has finished, is `NotFound`.
    pub async fn connect(&self, id: &str) -> Result<ModalExec, Error> {
        let exec = self.attach(id)?;
        let result = self
            .control
            .wait(id, !is_v1_sandbox_id(id), 0.0)
            .await
            .map_err(|s| from_status(s, "connect", Stage::Before))?;
        if let Some(r) = result {
            let how = if r.exception.is_empty() {
                format!("status {}", r.status)
            } else {
                r.exception
            };
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("sandbox {id} has finished ({how})"),
            )
            .with_retry(Retry::Never)
            .with_provider(PROVIDER)
            .with_operation("connect"));
        }
        exec.router("connect").await?;
        Ok(exec)
    }

    /// A handle on sandbox `id` without any call (not owned): its task and router access are
    /// fetched by the first exec, so a sandbox that does not exist is then `NotFound`.
    pub fn attach(&self, id: &str) -> Result<ModalExec, Error> {
        if !id.starts_with("sb-") || !id.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(vars::config_error(
                PROVIDER,
                format!("sandbox id {id:?} does not start with sb-"),
            )
            .with_operation("connect"));
        }
        Ok(ModalExec::attached(
            self.config.clone(),
            self.control.clone(),
            id,
        ))
    }

    /// Lists the running sandboxes of the environment that carry every label of `filter` (as
    /// tags; Modal filters on the server).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let map = |s| from_status(s, "list", Stage::Before);
        let mut out = Vec::new();
        let mut before = 0.0;
        loop {
            let page = self
                .control
                .list_page(before, filter.labels())
                .await
                .map_err(map)?;
            let Some(last) = page.last() else { break };
            if before > 0.0 && last.created_at >= before {
                return Err(protocol("list", "SandboxListV2 did not page backwards"));
            }
            before = last.created_at;
            out.extend(page.into_iter().map(|s| {
                let finished = s
                    .task_info
                    .as_ref()
                    .and_then(|t| t.result.as_ref())
                    .is_some_and(|r| r.status != 0);
                let mut info = SandboxInfo::new(s.id)
                    .with_labels(
                        s.tags
                            .into_iter()
                            .map(|t| (t.tag_name, t.tag_value))
                            .collect(),
                    )
                    .with_state(if finished {
                        SandboxState::Stopped
                    } else {
                        SandboxState::Running
                    });
                if !s.image_id.is_empty() {
                    info = info.with_image(s.image_id);
                }
                info
            }));
        }
        // Modal filters already; a server that did not is caught here.
        Ok(out.into_iter().filter(|i| filter.matches(i)).collect())
    }

    /// Snapshots sandbox `id`'s filesystem (`TaskSnapshotFilesystem`): an image id, which
    /// [`SandboxSpec::with_snapshot`] starts a sandbox from. Kept for the request's ttl, else the
    /// client's default of 30 days, until deleted when it asks `never_expires` (the client's
    /// `ttl=None`); the sandbox runs on.
    pub async fn snapshot(
        &self,
        id: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        let kind = LIFECYCLE.state.check_snapshot(PROVIDER, &request)?;
        let ttl = (!request.never_expires).then(|| request.ttl.unwrap_or(SNAPSHOT_TTL));
        let image_id = self.attach(id)?.snapshot_filesystem(ttl).await?;
        let mut info = SnapshotInfo::new(image_id, kind).with_source(id);
        if let Some(ttl) = ttl {
            info = info.with_expires(SystemTime::now() + ttl);
        }
        Ok(SnapshotOutcome::new(info, SandboxState::Running))
    }

    /// Deletes a snapshot's image (`ImageDelete`); one already gone is `Ok(())`.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        LIFECYCLE.state.check_delete_snapshot(PROVIDER, snapshot)?;
        let r = self
            .control
            .image_delete(snapshot)
            .await
            .map_err(|s| from_status(s, "delete_snapshot", Stage::Before));
        execseam_adapter_kit::gone_is_destroyed(r)
    }

    /// The URL of `port`, a port declared at create ([`SandboxSpec::with_port`]); a port not
    /// declared is `InvalidConfig`.
    pub async fn expose(&self, id: &str, port: u16) -> Result<ExposedPort, Error> {
        LIFECYCLE.state.check_expose(PROVIDER, port)?;
        let exposed = self.exposed(id).await?;
        execseam_adapter_kit::declared_port(PROVIDER, id, port, exposed)
    }

    /// The tunnels of sandbox `id` (`SandboxGetTunnelsV2`): per port, its unencrypted TCP
    /// socket as `http://{unencrypted_host}:{unencrypted_port}` (the client's
    /// `Tunnel.tcp_socket`), else, for an encrypted-only port made elsewhere, its TLS URL
    /// (`Tunnel.url`: `https://{host}`, `:{port}` unless 443).
    pub async fn exposed(&self, id: &str) -> Result<Vec<ExposedPort>, Error> {
        LIFECYCLE.state.check_exposed(PROVIDER)?;
        let wait = TUNNELS_WAIT.min(self.config.request_timeout / 2);
        let tunnels = self
            .control
            .tunnels(id, !is_v1_sandbox_id(id), wait)
            .await
            .map_err(|s| from_status(s, "exposed", Stage::Before))?;
        tunnels
            .into_iter()
            .map(|t| {
                let port = u16::try_from(t.container_port)
                    .map_err(|_| protocol("exposed", "a tunnel's container_port is not a port"))?;
                let url = match (t.unencrypted_host, t.unencrypted_port) {
                    (Some(host), Some(p)) if !host.is_empty() => format!("http://{host}:{p}"),
                    _ if t.port == 443 => format!("https://{}", t.host),
                    _ => format!("https://{}:{}", t.host, t.port),
                };
                Ok(ExposedPort::new(port, url))
            })
            .collect()
    }

    /// Terminates a sandbox (`SandboxTerminateV2`, or `SandboxTerminate` for a V1 id); one that
    /// does not exist is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        let r = self
            .control
            .terminate(id, !is_v1_sandbox_id(id))
            .await
            .map_err(|s| from_status(s, "destroy", Stage::Before));
        execseam_adapter_kit::gone_is_destroyed(r)
    }
}

impl Provider for ModalProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: CAPABILITIES,
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(
        ModalProvider: create, connect, attach, list, destroy, snapshot, delete_snapshot, expose, exposed
    );
}
