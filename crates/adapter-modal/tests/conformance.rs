//! The conformance suite against the Modal adapter (`cargo xtask conformance --adapter modal`):
//! against the emulator (with every fault), or against Modal itself with `EXECSEAM_LIVE=1`
//! (`MODAL_TOKEN_ID`/`MODAL_TOKEN_SECRET`, see `docs/adapters/modal.md`).

use std::sync::Arc;
use std::time::Duration;

use execseam_conformance::Target;
use execseam_core::{Command, Error, ErrorKind, Exec, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::modal::{ModalEmulator, TOKEN_ID};
use execseam_modal::{ModalConfig, ModalExec, ModalProvider};

/// The scratch directory, in root's home (a private directory of the emulated sandbox).
const SCRATCH: &str = "/root/execseam-conformance";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let provider = ModalProvider::from_env()?;
            let exec = provider.create(SandboxSpec::new()).await?;
            prepare(&exec).await?;
            return Ok(Target::new("modal", Arc::new(exec))
                .provider(Arc::new(provider))
                .missing_sandbox_id("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator = ModalEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let config = ModalConfig::new(TOKEN_ID, emulator.token_secret())
            .server_url(emulator.url())
            .sandbox_timeout(Duration::from_secs(3600));
        let provider = ModalProvider::new(config.clone())?;
        let exec = provider.create(SandboxSpec::new()).await?;
        prepare(&exec).await?;

        // An endpoint where nothing listens: bind a port, then drop the listener.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dead = ModalProvider::new(config.server_url(format!("http://127.0.0.1:{dead_port}")))?
            .attach(exec.id())?;
        // A V2 sandbox id the emulator never issued.
        let vanished = provider.attach("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")?;
        let faults = emulator.faults().clone();
        let counter = emulator.sandbox_counter();
        Ok(Target::new("modal", Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(SCRATCH)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(vanished))
            .faults(Arc::new(faults))
            .provider(Arc::new(provider))
            .live_sandboxes(counter)
            .missing_sandbox_id("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .proptest_cases(16)
            .keep_alive(emulator))
    });
}

async fn prepare(exec: &ModalExec) -> Result<(), Error> {
    let out = exec.exec(Command::new(["mkdir", "-p", SCRATCH])?).await?;
    if !out.exit.success() {
        return Err(Error::new(
            ErrorKind::Internal,
            format!("cannot create the scratch directory: {out:?}"),
        ));
    }
    Ok(())
}
