//! The conformance suite against the Modal adapter (`cargo xtask conformance --adapter modal`):
//! against the emulator (with every fault), or against Modal itself with `EXECSEAM_LIVE=1`
//! (`MODAL_TOKEN_ID`/`MODAL_TOKEN_SECRET`, see `docs/adapters/modal.md`).

use std::sync::Arc;
use std::time::Duration;

use execseam_conformance::Target;
use execseam_core::{Command, Error, ErrorKind, Exec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::modal::ModalEmulator;
use execseam_modal::{ModalConfig, ModalExec};

/// The scratch directory, in root's home (a private directory of the emulated sandbox).
const SCRATCH: &str = "/root/execseam-conformance";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let exec = ModalExec::from_env().await?;
            prepare(&exec).await?;
            return Ok(Target::new("modal", Arc::new(exec))
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator = ModalEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let config =
            ModalConfig::new(execseam_emulators::modal::TOKEN_ID, emulator.token_secret())?
                .server_url(emulator.url())?
                .sandbox_timeout(Duration::from_secs(3600))?;
        let exec = ModalExec::create(config.clone()).await?;
        prepare(&exec).await?;

        // An endpoint where nothing listens: bind a port, then drop the listener.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dead = ModalExec::attach(
            config
                .clone()
                .server_url(format!("http://127.0.0.1:{dead_port}"))?,
            exec.sandbox_id(),
        )?;
        // A V2 sandbox id the emulator never issued.
        let vanished = ModalExec::attach(config, "sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")?;
        let faults = emulator.faults().clone();
        Ok(Target::new("modal", Arc::new(exec))
            .scratch(SCRATCH)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(vanished))
            .faults(Arc::new(faults))
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
