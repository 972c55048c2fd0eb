//! The conformance suite against the Northflank adapter (`cargo xtask conformance --adapter
//! northflank`): against the emulator (with every fault), or against a real service with
//! `EXECSEAM_LIVE=1` (`NORTHFLANK_API_TOKEN`, `NORTHFLANK_PROJECT_ID`, and the service in
//! `NORTHFLANK_SERVICE_ID`; see `docs/adapters/northflank.md`).

use std::sync::Arc;

use execseam_conformance::Target;
use execseam_core::{Command, Error, ErrorKind, Exec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::northflank::{
    NorthflankEmulator, NorthflankOptions, PROJECT_ID, SERVICE_ID,
};
use execseam_northflank::{NorthflankConfig, NorthflankExec, NorthflankProvider};

/// The scratch directory, inside the container's working directory.
const SCRATCH: &str = "/app/execseam-conformance";

/// Why `background-child-detached` does not apply: Northflank's exec reaches the container
/// through Kubernetes' streaming exec, and the container runtime answers the exit only once the
/// output pipes are closed by every process holding them.
const EXIT_WAITS: &str = "Kubernetes exec (the proxy's backend) reports the exit after the output pipes close: containerd's CRI execInternal waits on attachDone after the exit (internal/cri/server/container_execsync.go; its drain timeout covers ExecSync only, and its comment names `bash -c \"sleep 365d &\"` as holding the pipe)";

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let provider = NorthflankProvider::from_env()?;
            let service = std::env::var("NORTHFLANK_SERVICE_ID").map_err(|_| {
                Error::invalid_config("NORTHFLANK_SERVICE_ID names the service to run in")
            })?;
            let exec = provider.connect(&service).await?;
            prepare(&exec).await?;
            return Ok(Target::new("northflank", Arc::new(exec))
                .provider(Arc::new(provider))
                .exit_waits_for_children(EXIT_WAITS)
                .scratch(SCRATCH)
                .live(true)
                .proptest_cases(4));
        }
        let emulator = NorthflankEmulator::start_with(
            EmulatorOptions::default(),
            NorthflankOptions::default(),
        )
        .await
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let config =
            NorthflankConfig::new(emulator.token(), PROJECT_ID).api_url(emulator.base_url());
        let provider = NorthflankProvider::new(config.clone())?;
        let exec = provider.connect(SERVICE_ID).await?;
        prepare(&exec).await?;
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dead = NorthflankProvider::new(
            config
                .clone()
                .api_url(format!("http://127.0.0.1:{dead_port}")),
        )?
        .attach(SERVICE_ID)?;
        let vanished = provider.attach("no-such-service")?;
        let faults = emulator.faults().clone();
        Ok(Target::new("northflank", Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(SCRATCH)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(vanished))
            .faults(Arc::new(faults))
            .provider(Arc::new(provider))
            .exit_waits_for_children(EXIT_WAITS)
            .proptest_cases(16)
            .keep_alive(emulator))
    });
}

async fn prepare(exec: &NorthflankExec) -> Result<(), Error> {
    let out = exec.exec(Command::new(["mkdir", "-p", SCRATCH])?).await?;
    if !out.exit.success() {
        return Err(Error::new(
            ErrorKind::Internal,
            format!("cannot create the scratch directory: {out:?}"),
        ));
    }
    Ok(())
}
