//! Containers on the engine: create (+ start), inspect, list, remove.

use execseam_adapter_kit::vars;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StartContainerOptions,
};
use execseam_core::{Deadline, Error, ErrorKind, SandboxInfo, SandboxState};

use crate::client::{LABEL_CREATE, bounded, label_filter};
use crate::config::{DockerConfig, Mode, WORKSPACE};
use crate::error::{engine, engine_hint, is_gone, is_podman_stopped_state};
use execseam_adapter_kit::retry::Stage;

/// Creates and starts a container for `config` with `labels`; one that fails to start is removed.
pub(crate) async fn create(
    docker: &Docker,
    config: &DockerConfig,
    mut labels: HashMap<String, String>,
) -> Result<String, Error> {
    let keepalive = config.keepalive_argv();
    // Names this create's container even when its answer (the id) never arrives whole.
    let nonce = execseam_adapter_kit::id::random_id(32);
    labels.insert(LABEL_CREATE.to_owned(), nonce.clone());
    let body = ContainerCreateBody {
        image: Some(config.image.clone()),
        entrypoint: Some(keepalive.clone()),
        cmd: Some(Vec::new()),
        user: config.user.clone(),
        // No `Env`: the container-wide env travels with each exec, on its stdin (see
        // `degrade::env_line`), since bollard logs request bodies (and inspect answers) at DEBUG.
        labels: Some(labels),
        exposed_ports: (!config.ports.is_empty())
            .then(|| config.ports.iter().map(|p| format!("{p}/tcp")).collect()),
        host_config: Some(host_config(config)),
        ..Default::default()
    };
    // Every request of the create is bounded as a whole, its answer's body included (bollard's
    // own timeout ends at the head: a stalled body hung the create; issue 38's create cases).
    let created = bounded(
        docker.timeout(),
        docker.create_container(None::<CreateContainerOptions>, body),
    )
    .await;
    let created = match created {
        Ok(c) => c,
        Err(e) => {
            // The engine may have made it and the answer been lost (cut, malformed, stalled):
            // remove whatever carries this create's label.
            sweep(docker, &nonce).await;
            return Err(engine_hint(
                "create container",
                Stage::Submit,
                e,
                "the adapter never pulls: the image must be on the engine",
            ));
        }
    };
    // From here the container exists: every failure removes it, and so does a caller that stops
    // waiting (issue 38, D17/D18: a failed inspect, or a signal, left it running).
    let mut made = Unclaimed {
        docker: docker.clone(),
        id: Some(created.id.clone()),
    };
    let started = start_checked(docker, config, &created.id, &keepalive).await;
    made.hand_over();
    match started {
        Ok(()) => Ok(created.id),
        Err(e) => {
            remove(docker, &created.id).await;
            Err(e)
        }
    }
}

/// Removes the containers of a create whose answer was lost (by its [`LABEL_CREATE`]); a
/// failure is logged (the create's own error is what the caller gets).
async fn sweep(docker: &Docker, nonce: &str) {
    let labels = HashMap::from([(LABEL_CREATE.to_owned(), nonce.to_owned())]);
    let listed = tokio::time::timeout(docker.timeout(), list(docker, &labels)).await;
    let found = match listed
        .unwrap_or_else(|_| Err(Error::new(ErrorKind::Timeout(Deadline::Request), "list")))
    {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(error = %e, "listing a failed create's container failed");
            return;
        }
    };
    for c in found {
        remove(docker, &c.id).await;
    }
}

/// Starts a created container; a warm one must still run once started.
async fn start_checked(
    docker: &Docker,
    config: &DockerConfig,
    id: &str,
    keepalive: &[String],
) -> Result<(), Error> {
    if let Err(e) = bounded(
        docker.timeout(),
        docker.start_container(id, None::<StartContainerOptions>),
    )
    .await
    {
        let hint = format!("the keepalive {keepalive:?} must exist in the image");
        return Err(engine_hint("start container", Stage::Submit, e, &hint));
    }
    // With an init the start succeeds even when the keepalive cannot run: the init exits at once.
    // (Per call the exec that follows finds out, for the price of no extra request.)
    if config.mode == Mode::Warm && !state(docker, id).await?.is_some_and(|s| s.running) {
        return Err(vars::config_error(crate::PROVIDER, format!(
            "the container exited as soon as it started: does the image have the keepalive {keepalive:?}?"
        ))
        .with_operation("start container"));
    }
    Ok(())
}

/// A created container not yet handed to the caller: dropped, it is removed (through the
/// kit's reaper, which the front ends drain before exiting).
struct Unclaimed {
    docker: Docker,
    id: Option<String>,
}

impl Unclaimed {
    /// The caller has it now (or removes it itself).
    fn hand_over(&mut self) {
        self.id = None;
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let docker = self.docker.clone();
            execseam_adapter_kit::reaper::spawn(
                crate::PROVIDER,
                "remove the container",
                async move { destroy(&docker, &id).await },
            );
        }
    }
}

fn host_config(config: &DockerConfig) -> HostConfig {
    let ulimits = config
        .ulimits
        .iter()
        .map(|u| ResourcesUlimits {
            name: Some(u.name.clone()),
            soft: Some(u.soft),
            hard: Some(u.hard),
        })
        .collect::<Vec<_>>();
    HostConfig {
        init: Some(config.init),
        runtime: config.runtime.clone(),
        ulimits: (!ulimits.is_empty()).then_some(ulimits),
        memory: config.memory,
        // No swap beyond the memory limit, so the limit is what commands get.
        memory_swap: config.memory,
        nano_cpus: config.nano_cpus,
        pids_limit: config.pids_limit,
        network_mode: Some(config.network.clone()),
        port_bindings: (!config.ports.is_empty()).then(|| port_bindings(config)),
        binds: config
            .worktree
            .as_ref()
            .map(|w| vec![format!("{w}:{WORKSPACE}:rw")]),
        // The engine removes the container when its keepalive ends (per call: even if this
        // process died first). Exit codes never come from a container's wait status.
        auto_remove: Some(config.auto_remove()),
        ..Default::default()
    }
}

/// Each declared port published on a port the engine picks: on the loopback address when the
/// engine is local (a Unix socket), on every address when it is remote (reached by its host).
fn port_bindings(config: &DockerConfig) -> bollard::models::PortMap {
    let host_ip = if config.host.starts_with("unix://") {
        "127.0.0.1"
    } else {
        "0.0.0.0"
    };
    config
        .ports
        .iter()
        .map(|p| {
            let binding = bollard::models::PortBinding {
                host_ip: Some(host_ip.to_owned()),
                host_port: Some(String::new()),
            };
            (format!("{p}/tcp"), Some(vec![binding]))
        })
        .collect()
}

/// What the engine says about a container.
pub(crate) struct State {
    pub(crate) running: bool,
    pub(crate) paused: bool,
    pub(crate) oom_killed: Option<bool>,
}

/// The container's state; `None` if it does not exist.
pub(crate) async fn state(docker: &Docker, id: &str) -> Result<Option<State>, Error> {
    match bounded(
        docker.timeout(),
        docker.inspect_container(id, None::<InspectContainerOptions>),
    )
    .await
    {
        Ok(r) => {
            let s = r.state.unwrap_or_default();
            Ok(Some(State {
                running: s.running == Some(true),
                paused: s.paused == Some(true),
                oom_killed: s.oom_killed,
            }))
        }
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) if is_podman_stopped_state(&e) => Ok(Some(State {
            running: false,
            paused: false,
            oom_killed: None,
        })),
        Err(e) => Err(engine("inspect container", Stage::Before, e)),
    }
}

/// Removes a container and its anonymous volumes, killing what runs in it; one already gone is
/// fine.
pub(crate) async fn destroy(docker: &Docker, id: &str) -> Result<(), Error> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_gone(&e) => Ok(()),
        Err(e) => Err(engine("remove container", Stage::Before, e)),
    }
}

/// [`destroy`] on a clean-up path: a failure is logged.
pub(crate) async fn remove(docker: &Docker, id: &str) {
    if let Err(e) = destroy(docker, id).await {
        tracing::warn!(container = id, error = %e, "removing the container failed");
    }
}

/// The containers carrying every label of `labels`, sorted by id.
pub(crate) async fn list(
    docker: &Docker,
    labels: &HashMap<String, String>,
) -> Result<Vec<SandboxInfo>, Error> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(label_filter(labels)),
        ..Default::default()
    };
    // podman's transient `stopped` state breaks bollard's schema for the whole list; it lasts
    // until the engine has cleaned the container up, so ask again briefly.
    let mut delay = Duration::from_millis(20);
    let listed = loop {
        match docker.list_containers(Some(options.clone())).await {
            Err(e) if is_podman_stopped_state(&e) && delay < Duration::from_secs(2) => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => break other.map_err(|e| engine("list containers", Stage::Before, e))?,
        }
    };
    let mut out: Vec<SandboxInfo> = listed
        .into_iter()
        .filter_map(|c| {
            let state = match c.state.map(|s| s.to_string()).as_deref() {
                Some("running") => SandboxState::Running,
                Some("created" | "restarting") => SandboxState::Starting,
                Some("paused") => SandboxState::Paused,
                Some("exited" | "dead" | "removing" | "stopping") => SandboxState::Stopped,
                _ => SandboxState::Unknown,
            };
            let labels: BTreeMap<String, String> =
                c.labels.unwrap_or_default().into_iter().collect();
            let mut info = SandboxInfo::new(c.id?)
                .with_labels(labels)
                .with_state(state);
            if let Some(image) = c.image {
                info = info.with_image(image);
            }
            Some(info)
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Whether the image is on the engine.
pub(crate) async fn image_exists(docker: &Docker, image: &str) -> Result<bool, Error> {
    match docker.inspect_image(image).await {
        Ok(_) => Ok(true),
        Err(e) if is_gone(&e) => Ok(false),
        Err(e) => Err(engine("inspect image", Stage::Before, e)),
    }
}
