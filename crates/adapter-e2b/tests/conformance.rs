//! The conformance suite against the E2B adapter (`cargo xtask conformance --adapter e2b`):
//! against the emulator (with every fault), or against E2B itself with `EXECSEAM_LIVE=1`
//! (`E2B_API_KEY` and friends, see `docs/adapters/e2b.md`).

use std::sync::Arc;
use std::time::Duration;

use execseam_conformance::Target;
use execseam_core::{Command, Exec};
use execseam_e2b::{Attach, E2bConfig, E2bExec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::e2b::E2bEmulator;

/// The scratch directory, inside the sandbox's home.
const SCRATCH: &str = "/home/user/execseam-conformance";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let exec = E2bExec::from_env().await?;
            prepare(&exec).await?;
            return Ok(Target::new("e2b", Arc::new(exec))
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator = E2bEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| {
                execseam_core::Error::new(execseam_core::ErrorKind::Internal, e.to_string())
            })?;
        let mut config = E2bConfig::new(emulator.api_key());
        config.api_url = Some(emulator.base_url().parse().expect("a URL"));
        config.sandbox_url = Some(emulator.base_url().parse().expect("a URL"));
        config.sandbox_timeout = Duration::from_secs(3600);
        let exec = E2bExec::create(config.clone()).await?;
        prepare(&exec).await?;

        // An endpoint where nothing listens: bind a port, then drop the listener.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut dead = config.clone();
        dead.sandbox_url = Some(
            format!("http://127.0.0.1:{dead_port}")
                .parse()
                .expect("a URL"),
        );
        let dead = E2bExec::attach(
            dead,
            Attach {
                sandbox_id: exec.sandbox_id().to_owned(),
                envd_access_token: None,
                envd_version: "0.6.13".into(),
                domain: None,
            },
        )?;
        // A sandbox id the emulator never issued.
        let vanished = E2bExec::attach(
            config.clone(),
            Attach {
                sandbox_id: "inosuchsandbox000000".into(),
                envd_access_token: Some("nope".to_owned().into()),
                envd_version: "0.6.13".into(),
                domain: None,
            },
        )?;
        let faults = emulator.faults();
        Ok(Target::new("e2b", Arc::new(exec))
            .scratch(SCRATCH)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(vanished))
            .faults(Arc::new(faults))
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
