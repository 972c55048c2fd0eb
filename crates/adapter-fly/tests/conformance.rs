//! The conformance suite against the Fly Machines emulator (`cargo xtask conformance --adapter
//! fly`), or against a real app with `EXECSEAM_LIVE=1` (`FLY_API_TOKEN`, `FLY_APP_NAME`,
//! `EXECSEAM_FLY_IMAGE`, optionally `FLY_FLAPS_BASE_URL`): a machine is created for the run.

use std::sync::Arc;

use execseam_conformance::Target;
use execseam_core::SandboxSpec;
use execseam_core::{Error, ErrorKind};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::fly::{FlyEmulator, FlyOptions};
use execseam_fly::{FlyConfig, FlyProvider};

fn setup(e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("cannot start the Fly emulator: {e}"),
    )
}

/// A loopback URL where nothing listens (a port bound, then released).
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = l.local_addr().expect("its address").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").is_ok_and(|v| v == "1") {
            let provider = FlyProvider::from_env()?;
            let fly = provider.create(SandboxSpec::new()).await?;
            let scratch = format!("/tmp/execseam-conformance-{}", std::process::id());
            return Ok(Target::new("fly", Arc::new(fly))
                .provider(Arc::new(provider))
                .scratch(scratch)
                .proptest_cases(8)
                .live(true));
        }
        let emu = FlyEmulator::start_with(EmulatorOptions::default(), FlyOptions::default())
            .await
            .map_err(setup)?;
        let m = emu.default_machine();
        let config = |base: String| {
            FlyConfig::new(m.app(), emu.token())
                .base_url(base)
                .image("debian:stable")
        };
        let provider = FlyProvider::new(config(emu.base_url()))?;
        let fly = provider.connect(m.id()).await?;
        let dead = FlyProvider::new(config(dead_url()))?.attach(m.id())?;
        let gone = provider.attach("0000000000dead")?;
        let count = emu.sandbox_counter();
        let scratch = m.visible_path("/tmp/execseam-conformance");
        Ok(Target::new("fly", Arc::new(fly))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(scratch)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(gone))
            .faults(Arc::new(emu.faults().clone()))
            .provider(Arc::new(provider))
            .live_sandboxes(count)
            .proptest_cases(16)
            .keep_alive(emu))
    });
}
