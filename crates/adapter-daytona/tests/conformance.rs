//! The conformance suite against the Daytona emulator (`cargo xtask conformance --adapter
//! daytona`), or against Daytona itself with `EXECSEAM_LIVE=1` (see `DaytonaConfig::from_env`).

use std::sync::Arc;

use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind, Exec, Sandbox, SandboxSpec};
use execseam_daytona::{DaytonaConfig, DaytonaExec, DaytonaProvider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::daytona::DaytonaEmulator;

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").as_deref() == Ok("1") {
            let provider = DaytonaProvider::from_env()?;
            let exec = provider.create(SandboxSpec::new()).await?;
            let scratch = format!("/tmp/execseam-conformance-{}", std::process::id());
            mkdir(&exec, &scratch).await?;
            return Ok(Target::new("daytona", Arc::new(exec) as Arc<dyn Exec>)
                .provider(Arc::new(provider))
                .scratch(scratch)
                .live(true)
                .proptest_cases(8));
        }
        let emu = DaytonaEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, format!("emulator: {e}")))?;
        let provider = DaytonaProvider::new(
            DaytonaConfig::new(emu.token().to_owned()).api_url(emu.api_url()),
        )?;
        let exec = provider.create(SandboxSpec::new()).await?;
        let scratch = "/home/daytona/execseam-conformance".to_owned();
        let scratch = emu.visible_path(exec.id(), &scratch).unwrap_or(scratch);

        mkdir(&exec, &scratch).await?;

        // A port that was just free: nothing listens there.
        let dead_port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("an address").port()
        };
        let via = |toolbox: String| {
            DaytonaProvider::new(
                DaytonaConfig::new(emu.token().to_owned())
                    .api_url(emu.api_url())
                    .toolbox_url(toolbox),
            )
        };
        let dead = via(format!("http://127.0.0.1:{dead_port}/toolbox"))?.attach(exec.id())?;
        let vanished = via(emu.toolbox_proxy_url())?.attach("no-such-sandbox-7f3a")?;
        let faults = Arc::new(emu.faults().clone());
        let count = emu.sandbox_counter();
        Ok(Target::new("daytona", Arc::new(exec) as Arc<dyn Exec>)
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(scratch)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(vanished))
            .faults(faults)
            .provider(Arc::new(provider))
            .live_sandboxes(count)
            .proptest_cases(16)
            .keep_alive(emu))
    });
}

async fn mkdir(exec: &DaytonaExec, dir: &str) -> Result<(), Error> {
    let made = exec
        .exec(execseam_core::Command::new(["mkdir", "-p", "--", dir])?)
        .await?;
    if !made.exit.success() {
        return Err(Error::new(
            ErrorKind::Internal,
            format!("mkdir {dir}: {made:?}"),
        ));
    }
    Ok(())
}
