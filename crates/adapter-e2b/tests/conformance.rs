//! The conformance suite against the E2B adapter (`cargo xtask conformance --adapter e2b`):
//! against the emulator (with every fault), or against E2B itself with `EXECSEAM_LIVE=1`
//! (`E2B_API_KEY` and friends, see `docs/adapters/e2b.md`).

use std::sync::Arc;
use std::time::Duration;

use execseam_conformance::Target;
use execseam_core::{Command, Exec, SandboxSpec};
use execseam_e2b::{Attach, E2bConfig, E2bExec, E2bProvider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::e2b::E2bEmulator;

/// The scratch directory, inside the sandbox's home.
const SCRATCH: &str = "/home/user/execseam-conformance";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let provider = E2bProvider::from_env()?;
            let exec = provider.create(SandboxSpec::new()).await?;
            prepare(&exec).await?;
            return Ok(Target::new("e2b", Arc::new(exec))
                .provider(Arc::new(provider))
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator = E2bEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| {
                execseam_core::Error::new(execseam_core::ErrorKind::Internal, e.to_string())
            })?;
        let config = E2bConfig::new(emulator.api_key())
            .api_url(emulator.base_url())
            .sandbox_url(emulator.base_url())
            .sandbox_timeout(Duration::from_secs(3600));
        let provider = E2bProvider::new(config.clone())?;
        let exec = provider.create(SandboxSpec::new()).await?;
        prepare(&exec).await?;

        // An endpoint where nothing listens: bind a port, then drop the listener.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dead = E2bProvider::new(
            config
                .clone()
                .sandbox_url(format!("http://127.0.0.1:{dead_port}")),
        )?
        .attach_with(Attach {
            sandbox_id: execseam_core::Sandbox::id(&exec).to_owned(),
            envd_access_token: None,
            envd_version: "0.6.13".into(),
            domain: None,
        })?;
        // A sandbox id the emulator never issued.
        let vanished = provider.attach_with(Attach {
            sandbox_id: "inosuchsandbox000000".into(),
            envd_access_token: Some("nope".to_owned().into()),
            envd_version: "0.6.13".into(),
            domain: None,
        })?;
        let faults = emulator.faults().clone();
        let counter = emulator.sandbox_counter();
        Ok(Target::new("e2b", Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
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

async fn prepare(exec: &E2bExec) -> Result<(), execseam_core::Error> {
    let out = exec.exec(Command::new(["mkdir", "-p", SCRATCH])?).await?;
    if !out.exit.success() {
        return Err(execseam_core::Error::new(
            execseam_core::ErrorKind::Internal,
            format!("cannot create the scratch directory: {out:?}"),
        ));
    }
    Ok(())
}
