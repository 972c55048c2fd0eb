//! The conformance suite against the Vercel adapter (`cargo xtask conformance --adapter
//! vercel`): against the emulator (with every fault), or against Vercel itself with
//! `EXECSEAM_LIVE=1` (`VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID` or
//! `VERCEL_OIDC_TOKEN`; see `docs/adapters/vercel.md`).

use std::sync::Arc;
use std::time::Duration;

use execseam_conformance::Target;
use execseam_core::{Command, Error, ErrorKind, Exec, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator, VercelOptions};
use execseam_vercel::{VercelConfig, VercelExec, VercelProvider};

/// The scratch directory, inside the session's working directory.
const SCRATCH: &str = "/vercel/sandbox/execseam-conformance";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let provider = VercelProvider::from_env()?;
            let exec = provider.create(SandboxSpec::new()).await?;
            prepare(&exec).await?;
            return Ok(Target::new("vercel", Arc::new(exec))
                .provider(Arc::new(provider))
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator =
            VercelEmulator::start_with(EmulatorOptions::default(), VercelOptions::default())
                .await
                .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let config = VercelConfig::new(emulator.token(), TEAM_ID, PROJECT_ID)
            .api_url(emulator.base_url())
            .sandbox_timeout(Duration::from_secs(3600));
        let provider = VercelProvider::new(config.clone())?;
        let exec = provider.create(SandboxSpec::new()).await?;
        prepare(&exec).await?;

        // An endpoint where nothing listens: bind a port, then drop the listener.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dead = VercelProvider::new(
            config
                .clone()
                .api_url(format!("http://127.0.0.1:{dead_port}")),
        )?
        .attach_session(exec.id(), &exec.session_id());
        // A sandbox and session the emulator never issued.
        let vanished =
            provider.attach_session("no-such-sandbox", "se_00000000000000000000000000000000");
        let faults = emulator.faults().clone();
        let counter = emulator.sandbox_counter();
        Ok(Target::new("vercel", Arc::new(exec))
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

async fn prepare(exec: &VercelExec) -> Result<(), Error> {
    let out = exec.exec(Command::new(["mkdir", "-p", SCRATCH])?).await?;
    if !out.exit.success() {
        return Err(Error::new(
            ErrorKind::Internal,
            format!("cannot create the scratch directory: {out:?}"),
        ));
    }
    Ok(())
}
