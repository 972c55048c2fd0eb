//! Sandbox state on the engine: pause and unpause (the cgroup freezer: memory and processes
//! kept), snapshots as committed images labelled with their source (the container's writable
//! layer; volumes and bind mounts are not in them), sandboxes created from them, and ports
//! published at create.

use execseam_adapter_kit::StateChecks as _;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use bollard::query_parameters::{CommitContainerOptions, ListImagesOptions, RemoveImageOptions};
use execseam_adapter_kit::id;
use execseam_adapter_kit::retry::Stage;
use execseam_core::{
    Error, ErrorKind, ExposeSupport, ExposedPort, ForkSupport, Kept, PauseSupport, Retry,
    SandboxState, Scope, SnapshotInfo, SnapshotOutcome, SnapshotRequest, SnapshotSupport,
    SourceAfter, StateCapabilities, WhilePaused,
};

use crate::PROVIDER;
use crate::client;
use crate::containers;
use crate::error::{adapter, engine, is_gone};
use crate::provider::DockerProvider;

/// The label a snapshot image carries: the container it was committed from.
pub const LABEL_SNAPSHOT_SOURCE: &str = "io.execseam.snapshot.source";

/// The repository snapshot images are tagged in (`execseam-snapshot:<random>`).
pub const SNAPSHOT_REPOSITORY: &str = "execseam-snapshot";

/// Warm mode: `POST /containers/{id}/pause` (the freezer: processes and memory kept; an exec
/// while paused is `Conflict`), `POST /commit?pause=true` (the container frozen while its
/// writable layer is copied into an image), a fork as a commit and a create from it, and ports
/// published at create (`HostConfig.PortBindings`), found by inspect.
pub const STATE: StateCapabilities = StateCapabilities {
    pause: Some(PauseSupport {
        kinds: &[Kept::FilesystemAndMemory],
        scope: Scope::Root,
        while_paused: WhilePaused::Refused,
        connect_resumes: false,
    }),
    snapshot: Some(SnapshotSupport {
        kinds: &[Kept::Filesystem],
        scope: Scope::Root,
        source_after: SourceAfter::PausedBriefly,
        ..SnapshotSupport::FILESYSTEM
    }),
    fork: Some(ForkSupport {
        source_after: SourceAfter::PausedBriefly,
        ..ForkSupport::SNAPSHOT_AND_CREATE
    }),
    expose: Some(ExposeSupport::DECLARED_AT_CREATE),
};

fn state_error(kind: ErrorKind, operation: &'static str, message: String) -> Error {
    adapter(kind, Retry::Never, operation, message)
}

/// The engine's image id with its algorithm (`sha256:…`): podman's commit answers the bare hex.
fn image_id(id: &str) -> String {
    if id.contains(':') {
        id.to_owned()
    } else {
        format!("sha256:{id}")
    }
}

impl DockerProvider {
    fn state(&self) -> StateCapabilities {
        self.lifecycle().state
    }

    /// Freezes container `id` (`POST /containers/{id}/pause`); a paused one is `Ok`.
    pub async fn pause(&self, id: &str, keep: Option<Kept>) -> Result<SandboxState, Error> {
        self.state().check_pause(PROVIDER, keep)?;
        let docker = self.client.get().await?;
        match containers::state(docker, id).await? {
            None => Err(no_container("pause", id)),
            Some(s) if s.paused => Ok(SandboxState::Paused),
            Some(s) if !s.running => Err(state_error(
                ErrorKind::Conflict,
                "pause",
                format!("container {id:?} is not running: nothing to pause"),
            )
            .with_sandbox_state(SandboxState::Stopped)),
            Some(_) => {
                docker
                    .pause_container(id)
                    .await
                    .map_err(|e| engine("pause container", Stage::Before, e))?;
                Ok(SandboxState::Paused)
            }
        }
    }

    /// Thaws container `id` (`POST /containers/{id}/unpause`); a running one is `Ok`.
    pub async fn resume(&self, id: &str) -> Result<(), Error> {
        self.state().check_resume(PROVIDER)?;
        let docker = self.client.get().await?;
        match containers::state(docker, id).await? {
            None => Err(no_container("resume", id)),
            Some(s) if s.paused => docker
                .unpause_container(id)
                .await
                .map_err(|e| engine("unpause container", Stage::Before, e)),
            Some(_) => Ok(()),
        }
    }

    /// Commits container `id` into an image tagged `execseam-snapshot:<random>` and labelled
    /// [`LABEL_SNAPSHOT_SOURCE`]; the snapshot id is the image id.
    pub async fn snapshot(
        &self,
        id: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        let kind = self.state().check_snapshot(PROVIDER, &request)?;
        let docker = self.client.get().await?;
        let tag = id::random_id(16);
        let options = CommitContainerOptions {
            container: Some(id.to_owned()),
            repo: Some(SNAPSHOT_REPOSITORY.to_owned()),
            tag: Some(tag.clone()),
            pause: true,
            changes: Some(format!("LABEL {LABEL_SNAPSHOT_SOURCE}={id}")),
            ..Default::default()
        };
        let committed = docker
            .commit_container(options, bollard::models::ContainerConfig::default())
            .await
            .map_err(|e| match engine("commit container", Stage::Submit, e) {
                e if e.kind() == ErrorKind::NotFound => no_container("snapshot", id),
                e => e,
            })?;
        let state = match containers::state(docker, id).await? {
            Some(s) if s.paused => SandboxState::Paused,
            Some(s) if s.running => SandboxState::Running,
            Some(_) => SandboxState::Stopped,
            None => SandboxState::Unknown,
        };
        let info = SnapshotInfo::new(image_id(&committed.id), kind)
            .with_source(id)
            .with_name(format!("{SNAPSHOT_REPOSITORY}:{tag}"))
            .with_created(SystemTime::now());
        Ok(SnapshotOutcome::new(info, state))
    }

    /// The snapshot images this configuration's containers were committed into (of `source`
    /// only, when given), sorted by id.
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        self.state().check_list_snapshots(PROVIDER)?;
        let docker = self.client.get().await?;
        // One label on the engine (podman 4.3 answers nothing for two label filters on images),
        // this configuration's labels here.
        let labels: HashMap<String, String> = client::labels(&self.config, []);
        let one = match source {
            Some(s) => format!("{LABEL_SNAPSHOT_SOURCE}={s}"),
            None => LABEL_SNAPSHOT_SOURCE.to_owned(),
        };
        let filters = HashMap::from([("label".to_owned(), vec![one])]);
        let images = docker
            .list_images(Some(ListImagesOptions {
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .map_err(|e| engine("list images", Stage::Before, e))?;
        let mut out: Vec<SnapshotInfo> = images
            .into_iter()
            .filter(|i| labels.iter().all(|(k, v)| i.labels.get(k) == Some(v)))
            .filter_map(|i| {
                let source = i.labels.get(LABEL_SNAPSHOT_SOURCE)?.clone();
                let mut info = SnapshotInfo::new(image_id(&i.id), Kept::Filesystem)
                    .with_source(source)
                    .with_created(
                        SystemTime::UNIX_EPOCH
                            + Duration::from_secs(u64::try_from(i.created).unwrap_or(0)),
                    );
                if let Ok(size) = u64::try_from(i.size) {
                    info = info.with_size(size);
                }
                for t in i.repo_tags {
                    info = info.with_name(t);
                }
                Some(info)
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Removes a snapshot image (never forced: one a container still runs from is `Conflict`);
    /// an image that is not a snapshot is `NotFound`, one already gone `Ok`.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        self.state().check_delete_snapshot(PROVIDER, snapshot)?;
        let docker = self.client.get().await?;
        match docker.inspect_image(snapshot).await {
            Err(e) if is_gone(&e) => return Ok(()),
            Err(e) => return Err(engine("inspect image", Stage::Before, e)),
            Ok(i) => {
                let labelled = i
                    .config
                    .and_then(|c| c.labels)
                    .is_some_and(|l| l.contains_key(LABEL_SNAPSHOT_SOURCE));
                if !labelled {
                    return Err(state_error(
                        ErrorKind::NotFound,
                        "delete_snapshot",
                        format!(
                            "image {snapshot:?} is not a snapshot (no {LABEL_SNAPSHOT_SOURCE} label): not removed"
                        ),
                    ));
                }
            }
        }
        let options = RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        match docker.remove_image(snapshot, Some(options), None).await {
            Ok(_) => Ok(()),
            Err(e) if is_gone(&e) => Ok(()),
            Err(e) => Err(engine("remove image", Stage::Before, e)),
        }
    }

    /// The URL of container port `port`, published at create: `http://127.0.0.1:<host port>` on
    /// a local engine, the engine's host on a remote one.
    pub async fn expose(&self, id: &str, port: u16) -> Result<ExposedPort, Error> {
        self.state().check_expose(PROVIDER, port)?;
        let published = self.published(id, "expose").await?;
        published
            .into_iter()
            .find(|p| p.port == port)
            .ok_or_else(|| {
                state_error(
                    ErrorKind::InvalidConfig,
                    "expose",
                    format!(
                        "port {port} of container {id:?} is not published: the engine publishes ports only at create (SandboxSpec::with_port)"
                    ),
                )
            })
    }

    /// The published ports of container `id`, sorted.
    pub async fn exposed(&self, id: &str) -> Result<Vec<ExposedPort>, Error> {
        self.state().check_exposed(PROVIDER)?;
        self.published(id, "exposed").await
    }

    async fn published(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Vec<ExposedPort>, Error> {
        let docker = self.client.get().await?;
        let inspected = match docker
            .inspect_container(
                id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
        {
            Ok(i) => i,
            Err(e) if is_gone(&e) => return Err(no_container(operation, id)),
            Err(e) => return Err(engine("inspect container", Stage::Before, e)),
        };
        let remote_host = remote_host(&self.config.host);
        let mut out = Vec::new();
        let ports = inspected
            .network_settings
            .and_then(|n| n.ports)
            .unwrap_or_default();
        for (key, bindings) in ports {
            let Some(port) = key.strip_suffix("/tcp").and_then(|p| p.parse::<u16>().ok()) else {
                continue;
            };
            let Some(b) = bindings
                .into_iter()
                .flatten()
                .find(|b| b.host_port.as_deref().is_some_and(|p| !p.is_empty()))
            else {
                continue;
            };
            let host_port = b.host_port.unwrap_or_default();
            let host = match (&remote_host, b.host_ip.as_deref()) {
                (Some(h), Some("" | "0.0.0.0" | "::") | None) => h.clone(),
                (_, Some("" | "0.0.0.0") | None) => "127.0.0.1".to_owned(),
                (_, Some("::")) => "[::1]".to_owned(),
                (_, Some(ip)) if ip.contains(':') => format!("[{ip}]"),
                (_, Some(ip)) => ip.to_owned(),
            };
            out.push(ExposedPort::new(port, format!("http://{host}:{host_port}")));
        }
        out.sort_by_key(|p| p.port);
        Ok(out)
    }
}

/// The engine's host name when it is reached over TCP (`tcp://host:2376`), else `None`.
fn remote_host(engine: &str) -> Option<String> {
    let rest = engine
        .strip_prefix("tcp://")
        .or_else(|| engine.strip_prefix("http://"))
        .or_else(|| engine.strip_prefix("https://"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

fn no_container(operation: &'static str, id: &str) -> Error {
    state_error(
        ErrorKind::NotFound,
        operation,
        format!("no container {id:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_ids_carry_their_algorithm() {
        assert_eq!(image_id("3e36"), "sha256:3e36");
        assert_eq!(image_id("sha256:3e36"), "sha256:3e36");
    }

    #[test]
    fn a_remote_engine_is_reached_by_its_host() {
        assert_eq!(remote_host("unix:///run/docker.sock"), None);
        assert_eq!(
            remote_host("tcp://10.0.0.5:2376").as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(remote_host("tcp://[::1]:2376").as_deref(), Some("[::1]"));
        assert_eq!(
            remote_host("https://engine.example/").as_deref(),
            Some("engine.example")
        );
    }
}
