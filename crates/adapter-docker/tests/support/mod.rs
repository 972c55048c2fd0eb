//! The engine these tests run against: `DOCKER_HOST` and `EXECSEAM_DOCKER_IMAGE`, as
//! `.ci/podman start` writes them to `target/podman/env` (`.ci/run` starts it and exports them).
#![allow(dead_code)]

use execseam_docker::{DockerConfig, DockerExec};

/// Labels every container these tests create, so only they are ever removed.
pub const TEST_LABEL: &str = "io.execseam.test";

pub const NO_ENGINE: &str = "the docker adapter's tests need a container engine: DOCKER_HOST and \
EXECSEAM_DOCKER_IMAGE must name a running Docker-API engine and an image on it. Start the \
repository's own with `.ci/podman start && . target/podman/env` (`.ci/run` does this)";

/// The configuration from the environment, labelled `io.execseam.test=<suite>`; panics with
/// [`NO_ENGINE`] when there is none.
pub fn config(suite: &str) -> DockerConfig {
    for var in ["DOCKER_HOST", "EXECSEAM_DOCKER_IMAGE"] {
        if std::env::var(var).map_or(true, |v| v.is_empty()) {
            panic!("{var} is not set: {NO_ENGINE}");
        }
    }
    DockerConfig::from_env()
        .unwrap_or_else(|e| panic!("{e}: {NO_ENGINE}"))
        .label(TEST_LABEL, suite)
}

/// Fails (with [`NO_ENGINE`]) unless the engine answers.
pub async fn require_engine(config: &DockerConfig) {
    if let Err(e) = DockerExec::list(config).await {
        panic!("the engine does not answer ({e}): {NO_ENGINE}");
    }
}

/// Removes what an earlier, interrupted run of `config`'s suite left in `config`'s mode (its
/// labels name the suite, so nothing else is touched).
pub async fn sweep(config: &DockerConfig) {
    for c in DockerExec::list(config).await.unwrap_or_default() {
        if let Ok(e) = DockerExec::with_container(config.clone(), c.id) {
            let _ = e.destroy().await;
        }
    }
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
                if let Ok(e) = DockerExec::with_container(config, id) {
                    let _ = e.destroy().await;
                }
            });
        })
        .join();
    }
}
