//! The conformance suite against the Kubernetes adapter (`cargo xtask conformance --adapter
//! kubernetes`): against the emulator (claim mode on its warm pool, with every fault), or against
//! a real cluster with `EXECSEAM_LIVE=1` (`KUBECONFIG` and `EXECSEAM_KUBERNETES_*`, see
//! `docs/adapters/kubernetes.md`).

use std::sync::Arc;
use std::time::Duration;

use execseam_conformance::Target;
use execseam_core::{Command, Exec, SandboxSpec};
use execseam_emulator_kubernetes::{EmulatorOptions, KubernetesEmulator, NAMESPACE, WARM_POOL};
use execseam_kubernetes::{KubernetesConfig, KubernetesExec, KubernetesProvider};

/// The scratch directory (every image has a writable /tmp).
const SCRATCH: &str = "/tmp/execseam-conformance";

/// Why an exec's exit waits for a background child that holds its output (the emulator does
/// the same).
const EXIT_WAITS: &str = "Kubernetes reports an exec's exit once its output pipes close: containerd's CRI execInternal waits on attachDone after the process exits (internal/cri/server/container_execsync.go); a background child holding stdout keeps the stream, and the status, back";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let provider = KubernetesProvider::from_env()?;
            let exec = provider.create(SandboxSpec::new()).await?;
            prepare(&exec).await?;
            return Ok(Target::new("kubernetes", Arc::new(exec))
                .provider(Arc::new(provider))
                .exit_waits_for_children(EXIT_WAITS)
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator = KubernetesEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| {
                execseam_core::Error::new(execseam_core::ErrorKind::Internal, e.to_string())
            })?;
        let config = KubernetesConfig::new()
            .server(emulator.base_url())
            .token(emulator.token())
            .namespace(NAMESPACE)
            .warm_pool(WARM_POOL)
            .ready_timeout(Duration::from_secs(60));
        let provider = KubernetesProvider::new(config.clone())?;
        let exec = provider.create(SandboxSpec::new()).await?;
        prepare(&exec).await?;
        // An API server where nothing listens: bind a port, then drop the listener.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dead = KubernetesProvider::new(
            config
                .clone()
                .server(format!("http://127.0.0.1:{dead_port}")),
        )?
        .attach(execseam_core::Sandbox::id(&exec))?;
        // A claim the cluster never had.
        let vanished = provider.attach("execseam-nosuchclaim")?;
        let faults = emulator.faults();
        let counter = emulator.sandbox_counter();
        Ok(Target::new("kubernetes", Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .exit_waits_for_children(EXIT_WAITS)
            .scratch(SCRATCH)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(vanished))
            .faults(Arc::new(faults))
            .provider(Arc::new(provider))
            .live_sandboxes(counter)
            .proptest_cases(16)
            .keep_alive(emulator))
    });
}

async fn prepare(exec: &KubernetesExec) -> Result<(), execseam_core::Error> {
    let out = exec.exec(Command::new(["mkdir", "-p", SCRATCH])?).await?;
    if !out.exit.success() {
        return Err(execseam_core::Error::new(
            execseam_core::ErrorKind::Internal,
            format!("cannot create the scratch directory: {out:?}"),
        ));
    }
    Ok(())
}
