//! The engine these tests run against: the machine's (`DOCKER_HOST` and `EXECSEAM_DOCKER_IMAGE`
//! set), else the repository's podman, which the first test that needs it starts
//! (`execseam_test_util::fixtures::podman`: `.ci/podman start`, stopped when the test process ends).
#![allow(dead_code)]

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use execseam_core::{Sandbox, SandboxSpec};
use execseam_docker::{DockerConfig, DockerExec, DockerProvider, LABEL_MODE, Mode};

/// Labels every container these tests create, so only they are ever removed.
pub const TEST_LABEL: &str = "io.execseam.test";

pub const NO_ENGINE: &str = "the docker adapter's tests need a container engine: the one named by \
DOCKER_HOST and EXECSEAM_DOCKER_IMAGE, or the repository's podman, which the tests start themselves";

/// The engine's variables (starts the repository's podman on first use).
pub fn var(name: &str) -> Option<String> {
    execseam_test_util::fixtures::podman().var(name)
}

/// The configuration from the engine's variables, labelled `io.execseam.test=<suite>`.
pub fn config(suite: &str) -> DockerConfig {
    <execseam_docker::Docker as execseam_adapter_kit::Adapter>::config_from(&var)
        .unwrap_or_else(|e| panic!("{e}: {NO_ENGINE}"))
        .label(TEST_LABEL, suite)
}

pub fn provider(config: &DockerConfig) -> DockerProvider {
    DockerProvider::new(config.clone()).expect("a valid configuration")
}

/// The engine, straight through bollard (to stop, kill and list behind the adapter's back).
pub async fn engine() -> Docker {
    let host = var("DOCKER_HOST").unwrap_or_default();
    let d = match host.strip_prefix("unix://") {
        Some(socket) => Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION),
        None => Docker::connect_with_http(&host, 120, bollard::API_DEFAULT_VERSION),
    }
    .unwrap_or_else(|e| panic!("{e}: {NO_ENGINE}"));
    d.negotiate_version()
        .await
        .unwrap_or_else(|e| panic!("the engine does not answer ({e}): {NO_ENGINE}"))
}

/// The ids of `suite`'s containers in `mode`, running or not.
pub async fn containers(suite: &str, mode: Mode) -> Vec<String> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![
            format!("{TEST_LABEL}={suite}"),
            format!("{LABEL_MODE}={}", mode.as_str()),
        ],
    )]);
    let options = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let mut ids: Vec<String> = engine()
        .await
        .list_containers(Some(options))
        .await
        .expect("listing containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

/// Removes what an earlier, interrupted run of `suite` left (its labels name the suite, so
/// nothing else is touched).
pub async fn sweep(suite: &str) {
    for mode in [Mode::Warm, Mode::PerCall] {
        sweep_mode(suite, mode).await;
    }
}

/// [`sweep`], in one mode.
pub async fn sweep_mode(suite: &str, mode: Mode) {
    let d = engine().await;
    for id in containers(suite, mode).await {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let _ = d.remove_container(&id, Some(options)).await;
    }
    sweep_snapshots(suite).await;
}

/// Removes `suite`'s snapshot images no container uses any more (a fork's stays while the fork
/// runs: the engine refuses to remove an image in use).
pub async fn sweep_snapshots(suite: &str) {
    let d = engine().await;
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![
            format!("{TEST_LABEL}={suite}"),
            execseam_docker::LABEL_SNAPSHOT_SOURCE.to_owned(),
        ],
    )]);
    let options = bollard::query_parameters::ListImagesOptions {
        filters: Some(filters),
        ..Default::default()
    };
    for image in d.list_images(Some(options)).await.unwrap_or_default() {
        let _ = d
            .remove_image(
                &image.id,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
    }
}

/// A warm sandbox of `suite` (owned), and a guard that removes it.
pub async fn warm_with(config: DockerConfig) -> (DockerExec, Destroy) {
    let exec = provider(&config.clone().mode(Mode::Warm))
        .create(SandboxSpec::new())
        .await
        .unwrap_or_else(|e| panic!("creating a warm container: {e}: {NO_ENGINE}"));
    let id = exec.id().to_owned();
    (exec, Destroy(config, id))
}

/// Removes the warm container when dropped, from a thread with its own runtime and client (so it
/// works whichever runtime is shutting down).
pub struct Destroy(pub DockerConfig, pub String);

impl Drop for Destroy {
    fn drop(&mut self) {
        let (config, id) = (self.0.clone(), self.1.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                if let Ok(p) = DockerProvider::new(config.mode(Mode::Warm)) {
                    let _ = p.destroy(&id).await;
                }
            });
        })
        .join();
    }
}

/// `Sandbox::destroy`, named.
pub async fn destroy(exec: &DockerExec) {
    Sandbox::destroy(exec).await.expect("destroy");
}
