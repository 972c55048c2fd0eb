//! The conformance suite against a real container engine, in both modes
//! (`cargo xtask conformance --adapter docker`).
//!
//! One binary, two runs: without `EXECSEAM_DOCKER_MODE` it re-runs itself once per mode (`warm`,
//! recorded as `docs/conformance/docker.txt`, and `per-call`, recorded as
//! `docs/conformance/docker-per-call.txt`) and fails if either fails. With the variable set it runs
//! that mode only. The engine is the one in `DOCKER_HOST` with the image `EXECSEAM_DOCKER_IMAGE`
//! (`.ci/podman start` provides both); without one the run fails, saying so.
//!
//! There is no emulator: the engine is the backend. The HTTP-level fault cases are not applicable
//! (the injector below declines them); `fault-sandbox-vanishes` is caused for real (the warm
//! container is killed mid-command and restarted afterwards; the per-call container is removed).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{KillContainerOptions, StartContainerOptions};
use execseam_conformance::{Fault, Faults, Target};
use execseam_docker::config::ENV_MODE;
use execseam_docker::{DockerConfig, DockerExec, Mode};

fn record_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Warm => "docker",
        Mode::PerCall => "docker-per-call",
    }
}

fn main() {
    let mode = match std::env::var(ENV_MODE) {
        Ok(m) => m.parse::<Mode>().expect("EXECSEAM_DOCKER_MODE"),
        Err(_) => return both_modes(),
    };
    execseam_conformance::main(move || async move {
        let config = support::config("conformance").mode(mode);
        support::require_engine(&config).await;
        let dead_socket =
            std::env::temp_dir().join(format!("execseam-no-engine-{}.sock", std::process::id()));
        let dead_host = format!("unix://{}", dead_socket.display());
        match mode {
            Mode::Warm => {
                let exec = DockerExec::create(config.clone()).await?;
                let id = exec.container_id().expect("warm").to_owned();
                let dead = DockerExec::with_container(config.clone().host(dead_host), &id)?;
                // A container this adapter created, then removed.
                let gone = DockerExec::create(config.clone()).await?;
                gone.destroy().await?;
                let faults = EngineFaults::new(Some(id.clone()), config.clone());
                Ok(Target::new(record_name(mode), Arc::new(exec))
                    .scratch("/tmp/execseam-conformance")
                    .dead_endpoint(Arc::new(dead))
                    .vanished_sandbox(Arc::new(gone))
                    .faults(Arc::new(faults))
                    .proptest_cases(16)
                    .keep_alive(support::Destroy(config, id)))
            }
            Mode::PerCall => {
                let worktree = tempfile::tempdir().map_err(|e| {
                    execseam_core::Error::new(execseam_core::ErrorKind::Internal, e.to_string())
                })?;
                let config = config.worktree(worktree.path().to_string_lossy());
                let exec = DockerExec::per_call(config.clone())?;
                let dead = DockerExec::per_call(config.clone().host(dead_host))?;
                // Per call there is no sandbox to lose but the image: one that is not there.
                let missing = DockerConfig::new("localhost/execseam-no-such-image:0")
                    .label(support::TEST_LABEL, "conformance");
                let gone = DockerExec::per_call(missing)?;
                let faults = EngineFaults::new(None, config);
                Ok(Target::new(record_name(mode), Arc::new(exec))
                    .scratch("/workspace/execseam-conformance")
                    .dead_endpoint(Arc::new(dead))
                    .vanished_sandbox(Arc::new(gone))
                    .faults(Arc::new(faults))
                    .proptest_cases(8)
                    .keep_alive(worktree))
            }
        }
    });
}

/// Real engine faults: only [`Fault::SandboxVanishes`], which the engine can be made to do.
struct EngineFaults {
    /// The warm container (killed, then restarted by `clear`), or `None` per call.
    warm: Option<String>,
    config: DockerConfig,
    pending: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl EngineFaults {
    fn new(warm: Option<String>, config: DockerConfig) -> EngineFaults {
        EngineFaults {
            warm,
            config,
            pending: Mutex::new(None),
        }
    }
}

impl Faults for EngineFaults {
    fn inject(&self, fault: Fault) -> bool {
        if fault != Fault::SandboxVanishes {
            return false;
        }
        let (warm, config) = (self.warm.clone(), self.config.clone());
        let task = tokio::spawn(async move {
            // The case's command runs `printf start; sleep 5`: take the container away in the middle.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let docker = Docker::connect_with_defaults().expect("DOCKER_HOST");
            match warm {
                Some(id) => {
                    let _ = docker
                        .kill_container(&id, None::<KillContainerOptions>)
                        .await;
                }
                None => {
                    for c in DockerExec::list(&config).await.unwrap_or_default() {
                        if let Ok(e) = DockerExec::with_container(config.clone(), c.id) {
                            let _ = e.destroy().await;
                        }
                    }
                }
            }
        });
        *self.pending.lock().unwrap() = Some(task);
        true
    }

    fn clear(&self) {
        if let Some(t) = self.pending.lock().unwrap().take() {
            t.abort();
        }
        let Some(id) = self.warm.clone() else { return };
        // Bring the warm container back for the cases that follow (its filesystem is kept).
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let docker = Docker::connect_with_defaults().expect("DOCKER_HOST");
                let _ = docker
                    .start_container(&id, None::<StartContainerOptions>)
                    .await;
            });
        })
        .join();
    }
}

/// Runs this binary once per mode, passing the arguments through (a name filter).
fn both_modes() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut failed = Vec::new();
    for mode in [Mode::Warm, Mode::PerCall] {
        println!("=== mode {} ===", mode.as_str());
        let status = std::process::Command::new(&exe)
            .args(&args)
            .env(ENV_MODE, mode.as_str())
            .status()
            .expect("running the conformance binary");
        if !status.success() {
            failed.push(mode.as_str());
        }
    }
    if !failed.is_empty() {
        eprintln!("conformance failed in mode(s): {}", failed.join(", "));
        std::process::exit(1);
    }
}
