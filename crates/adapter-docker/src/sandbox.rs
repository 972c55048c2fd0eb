//! Containers: create (+ start), inspect, list, remove.

use bollard::Docker;
use bollard::errors::Error as EngineError;
use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StartContainerOptions,
};
use execseam_core::Error;

use crate::client::{label_filter, labels};
use crate::config::{DockerConfig, Mode, WORKSPACE};
use crate::error::{Stage, engine, engine_hint, invalid_config, is_gone};

/// Creates and starts a container for `config`; a container that fails to start is removed.
pub(crate) async fn create(docker: &Docker, config: &DockerConfig) -> Result<String, Error> {
    let keepalive = config.keepalive_argv();
    let body = ContainerCreateBody {
        image: Some(config.image.clone()),
        entrypoint: Some(keepalive.clone()),
        cmd: Some(Vec::new()),
        user: config.user.clone(),
        labels: Some(labels(config)),
        host_config: Some(host_config(config)),
        ..Default::default()
    };
    let created = docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .map_err(|e| {
            engine_hint(
                "create container",
                Stage::Before,
                e,
                "the adapter never pulls: the image must be on the engine",
            )
        })?;
    if let Err(e) = docker
        .start_container(&created.id, None::<StartContainerOptions>)
        .await
    {
        remove(docker, &created.id).await;
        let hint = format!("the keepalive {keepalive:?} must exist in the image");
        return Err(engine_hint("start container", Stage::Before, e, &hint));
    }
    // With an init the start succeeds even when the keepalive cannot run: the init exits at once.
    if config.mode == Mode::Warm
        && !state(docker, &created.id, "inspect container")
            .await?
            .is_some_and(|s| s.running)
    {
        remove(docker, &created.id).await;
        return Err(invalid_config(format!(
            "the container exited right after it started: does the image have the keepalive {keepalive:?}?"
        ))
        .with_operation("start container"));
    }
    Ok(created.id)
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
        // No swap beyond the memory limit, so the limit is what the command gets.
        memory_swap: config.memory,
        nano_cpus: config.nano_cpus,
        pids_limit: config.pids_limit,
        network_mode: Some(config.network.clone()),
        binds: config
            .worktree
            .as_ref()
            .map(|w| vec![format!("{w}:{WORKSPACE}:rw")]),
        // Per call, the engine removes the container once its keepalive ends, even if this
        // process died before removing it (the exit code never comes from its wait status).
        auto_remove: Some(config.mode == Mode::PerCall),
        ..Default::default()
    }
}

/// What the engine says about a container: `None` if it does not exist.
pub(crate) struct State {
    pub(crate) running: bool,
    pub(crate) oom_killed: Option<bool>,
}

pub(crate) async fn state(
    docker: &Docker,
    id: &str,
    operation: &'static str,
) -> Result<Option<State>, Error> {
    match docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
    {
        Ok(r) => {
            let s = r.state.unwrap_or_default();
            Ok(Some(State {
                running: s.running == Some(true),
                oom_killed: s.oom_killed,
            }))
        }
        Err(e) if is_gone(&e) => Ok(None),
        // podman reports its own transient `stopped` state (exited, not yet cleaned up), which
        // Docker's schema, and so bollard, does not have.
        Err(EngineError::JsonDataError { message, .. })
            if message.contains("unknown variant `stopped`") =>
        {
            Ok(Some(State {
                running: false,
                oom_killed: None,
            }))
        }
        Err(e) => Err(engine(operation, Stage::Before, e)),
    }
}

/// Removes a container and its anonymous volumes, killing what runs in it; a container that is
/// already gone is fine. Failures are logged: this runs on cleanup paths.
pub(crate) async fn remove(docker: &Docker, id: &str) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => {}
        Err(e) if is_gone(&e) => {}
        Err(e) => tracing::warn!(container = id, error = %e, "removing the container failed"),
    }
}

/// Like [`remove`], with the failure returned.
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

/// One container this adapter created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The container id.
    pub id: String,
    /// The engine's state (`running`, `exited`, …).
    pub state: String,
    /// The image it was created from.
    pub image: String,
}

/// The containers created for `config`'s mode and labels, sorted by id.
pub(crate) async fn list(
    docker: &Docker,
    config: &DockerConfig,
) -> Result<Vec<ContainerInfo>, Error> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(label_filter(config)),
        ..Default::default()
    };
    // podman's transient `stopped` state breaks bollard's schema for the whole list; it lasts
    // until the engine has cleaned the container up, so ask again briefly.
    let mut delay = std::time::Duration::from_millis(20);
    let list = loop {
        match docker.list_containers(Some(options.clone())).await {
            Err(EngineError::JsonDataError { message, .. })
                if message.contains("unknown variant `stopped`")
                    && delay < std::time::Duration::from_secs(2) =>
            {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => break other.map_err(|e| engine("list containers", Stage::Before, e))?,
        }
    };
    let mut out: Vec<ContainerInfo> = list
        .into_iter()
        .filter_map(|c| {
            Some(ContainerInfo {
                id: c.id?,
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                image: c.image.unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

use crate::client::Client;
use crate::config::ENV_CONTAINER;
use crate::error::adapter;
use crate::exec::DockerExec;
use execseam_core::{ErrorKind, Retry};

impl DockerExec {
    /// Creates and starts a long-lived container from `config` (warm mode) and returns the
    /// adapter for it: the keepalive under an init, the labels, the limits, the runtime and
    /// ulimits given. [`destroy`](DockerExec::destroy) removes it.
    pub async fn create(config: DockerConfig) -> Result<DockerExec, Error> {
        let config = config.mode(Mode::Warm);
        config.validate()?;
        let client = Client::new(&config)?;
        let id = create(client.get().await?, &config).await?;
        DockerExec::from_parts(config, Some(id))
    }

    /// The adapter for an existing container `id` (started if it was stopped). Commands run with
    /// `config`'s user and workdir; its image and limits are not applied to a container that
    /// already exists.
    pub async fn connect(config: DockerConfig, id: impl Into<String>) -> Result<DockerExec, Error> {
        let config = config.mode(Mode::Warm);
        let id = id.into();
        let exec = DockerExec::from_parts(config, Some(id.clone()))?;
        let docker = exec.inner.client.get().await?;
        match state(docker, &id, "inspect container").await? {
            None => {
                return Err(adapter(
                    ErrorKind::NotFound,
                    Retry::Never,
                    "connect",
                    format!("no container {id:?}"),
                ));
            }
            Some(s) if !s.running => docker
                .start_container(&id, None::<StartContainerOptions>)
                .await
                .map_err(|e| engine("start container", Stage::Before, e))?,
            Some(_) => {}
        }
        Ok(exec)
    }

    /// The adapter for container `id`, without asking the engine anything: a container that does
    /// not exist (or an engine that is down) is reported by the first command.
    pub fn with_container(
        config: DockerConfig,
        id: impl Into<String>,
    ) -> Result<DockerExec, Error> {
        DockerExec::from_parts(config.mode(Mode::Warm), Some(id.into()))
    }

    /// [`connect`](DockerExec::connect) to `EXECSEAM_DOCKER_CONTAINER` if set, else
    /// [`create`](DockerExec::create) (warm), or [`per_call`](DockerExec::per_call), as
    /// [`DockerConfig::from_env`] says.
    pub async fn from_env() -> Result<DockerExec, Error> {
        let config = DockerConfig::from_env()?;
        match (
            config.mode,
            std::env::var(ENV_CONTAINER).ok().filter(|v| !v.is_empty()),
        ) {
            (Mode::PerCall, _) => DockerExec::per_call(config),
            (Mode::Warm, Some(id)) => DockerExec::connect(config, id).await,
            (Mode::Warm, None) => DockerExec::create(config).await,
        }
    }

    /// The containers this adapter created with `config`'s mode and labels, running or not,
    /// sorted by id.
    pub async fn list(config: &DockerConfig) -> Result<Vec<ContainerInfo>, Error> {
        config.validate()?;
        let client = Client::new(config)?;
        list(client.get().await?, config).await
    }

    /// Removes the warm container and its anonymous volumes, killing what runs in it. A
    /// container that is already gone is not an error. Per call there is nothing to remove.
    pub async fn destroy(&self) -> Result<(), Error> {
        match &self.inner.container {
            Some(id) => destroy(self.inner.client.get().await?, id).await,
            None => Ok(()),
        }
    }
}
