//! The conformance suite against a real container engine, in both modes
//! (`cargo xtask conformance --adapter docker`).
//!
//! One binary, two runs: without `EXECSEAM_DOCKER_MODE` it re-runs itself once per mode (`warm`,
//! recorded as `docs/conformance/docker.txt`, and `per-call`, recorded as
//! `docs/conformance/docker-per-call.txt`), both at once, and fails if either fails. With the
//! variable set it runs that mode only. The engine is the machine's (`DOCKER_HOST`,
//! `EXECSEAM_DOCKER_IMAGE`) or the repository's podman, started by this parent before the two
//! runs and shared by them (`support`); where none can be started the run fails, saying so. The
//! two runs label their containers and snapshots apart (`conformance-warm`,
//! `conformance-per-call`), so one's sweeps and counts never see the other's.
//!
//! There is no emulator: the engine is the backend. The HTTP-level fault cases are not applicable
//! (the injector below declines them); `fault-sandbox-vanishes` is caused for real (the warm
//! container is killed mid-command and restarted afterwards; the per-call container is removed).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::{KillContainerOptions, StartContainerOptions};
use execseam_conformance::{Fault, Faults, Target};
use execseam_core::{Sandbox, SandboxSpec};
use execseam_docker::{DockerProvider, Mode};

const ENV_MODE: &str = "EXECSEAM_DOCKER_MODE";

/// The label of this mode's containers and snapshot images (`io.execseam.test=<suite>`).
fn suite(mode: Mode) -> &'static str {
    match mode {
        Mode::Warm => "conformance-warm",
        Mode::PerCall => "conformance-per-call",
    }
}

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
        support::sweep(suite(mode)).await;
        let worktree = tempfile::tempdir().map_err(|e| {
            execseam_core::Error::new(execseam_core::ErrorKind::Internal, e.to_string())
        })?;
        let mut config = support::config(suite(mode)).mode(mode);
        if mode == Mode::Warm {
            // Publishing a port (state-expose-port) needs a network; the default is none.
            config = config.network("bridge");
        }
        if mode == Mode::PerCall {
            config = config.worktree(worktree.path().to_string_lossy());
        }
        let provider = DockerProvider::new(config.clone())?;
        let exec = provider.create(SandboxSpec::new()).await?;
        // Nothing listens on a socket path that does not exist.
        let dead_host = format!(
            "unix://{}",
            std::env::temp_dir()
                .join(format!("execseam-no-engine-{}.sock", std::process::id()))
                .display()
        );
        let dead = DockerProvider::new(config.clone().host(dead_host))?.attach(exec.id())?;
        let scratch = match mode {
            Mode::Warm => "/tmp/execseam-conformance",
            Mode::PerCall => "/workspace/execseam-conformance",
        };
        // A sandbox this adapter created, then destroyed.
        let gone = provider.create(SandboxSpec::new()).await?;
        Sandbox::destroy(&gone).await?;
        let faults = EngineFaults {
            warm: exec.container_id().map(str::to_owned),
            pending: Mutex::new(None),
        };
        let cases = if mode == Mode::Warm { 16 } else { 4 };
        let mut target = Target::new(record_name(mode), Arc::new(exec.clone()))
            .scratch(scratch)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(gone))
            .faults(Arc::new(faults))
            .provider(Arc::new(provider))
            .live_sandboxes(move || count(mode))
            .proptest_cases(cases)
            .keep_alive(worktree);
        if mode == Mode::PerCall {
            // Each command's container is removed (force, with what runs in it) before its
            // result returns: a background child ends with it.
            target = target.children_end_with_the_command(
                "per call: every command runs in a fresh container, removed with everything in it before the result returns",
            );
        }
        if let Some(id) = exec.container_id() {
            target = target.keep_alive(support::Destroy(config, id.to_owned()));
        }
        Ok(target)
    });
}

/// How many containers of this suite the engine holds (from a thread of its own: the count is
/// asked for synchronously).
fn count(mode: Mode) -> usize {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(support::containers(suite(mode), mode))
            .len()
    })
    .join()
    .expect("counting containers")
}

/// Real engine faults: only [`Fault::SandboxVanishes`], which the engine can be made to do.
struct EngineFaults {
    /// The warm container (killed, then restarted by `clear`), or `None` per call.
    warm: Option<String>,
    pending: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Faults for EngineFaults {
    fn inject(&self, fault: Fault) -> Result<(), String> {
        if fault != Fault::SandboxVanishes {
            return Err(execseam_conformance::cannot_inject(fault));
        }
        let warm = self.warm.clone();
        let task = tokio::spawn(async move {
            // The case's command runs `printf start; sleep 5`: take the container away meanwhile.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            match warm {
                Some(id) => {
                    let docker = support::engine().await;
                    let _ = docker
                        .kill_container(&id, None::<KillContainerOptions>)
                        .await;
                }
                None => support::sweep_mode(suite(Mode::PerCall), Mode::PerCall).await,
            }
        });
        *self.pending.lock().unwrap() = Some(task);
        Ok(())
    }

    fn clear(&self) {
        if let Some(t) = self.pending.lock().unwrap().take() {
            t.abort();
        }
        let Some(id) = self.warm.clone() else { return };
        // Bring the warm container back for the cases that follow (its filesystem is kept).
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(async {
                    let docker = support::engine().await;
                    let _ = docker
                        .start_container(&id, None::<StartContainerOptions>)
                        .await;
                });
        })
        .join();
    }
}

/// Runs this binary once per mode, both at once, passing the arguments through (a name filter,
/// `--exact`); each run's output is printed whole when it ends, warm first. `--list` lists the
/// cases once: both modes have the same ones, and a runner that lists first and then runs each
/// case by name (`cargo nextest run`) must not see duplicates; each case it runs then runs in both
/// modes.
fn both_modes() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let child = |mode: Mode| {
        let mut c = std::process::Command::new(&exe);
        c.args(&args).env(ENV_MODE, mode.as_str());
        c
    };
    if args.iter().any(|a| a == "--list") {
        let status = child(Mode::Warm)
            .status()
            .expect("running the conformance binary");
        std::process::exit(status.code().unwrap_or(1));
    }
    // The engine, started (or joined) once here, before either run: the runs join it, and it
    // stops when this process, the last of its users, ends.
    if support::var("DOCKER_HOST").is_none() {
        panic!("{}", support::NO_ENGINE);
    }
    let runs: Vec<_> = [Mode::Warm, Mode::PerCall]
        .into_iter()
        .map(|mode| {
            let mut c = child(mode);
            let run =
                std::thread::spawn(move || c.output().expect("running the conformance binary"));
            (mode, run)
        })
        .collect();
    let mut failed = Vec::new();
    for (mode, run) in runs {
        let out = run.join().expect("the run's thread");
        println!("=== mode {} ===", mode.as_str());
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            failed.push(mode.as_str());
        }
    }
    if !failed.is_empty() {
        eprintln!("conformance failed in mode(s): {}", failed.join(", "));
        std::process::exit(1);
    }
}
