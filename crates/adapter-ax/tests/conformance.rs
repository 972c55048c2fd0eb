//! The conformance suite against the ax emulator (`cargo xtask conformance --adapter ax`), or
//! against a real guest with `EXECSEAM_LIVE=1` (`EXECSEAM_SANDBOX`: the guest's host:port; optional `AX_TARGET_ACTOR`).

use std::sync::Arc;

use execseam_ax::{AxConfig, AxProvider};
use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::ax::{AxEmulator, PRIMARY_ACTOR};

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").is_ok_and(|v| v == "1") {
            let provider = AxProvider::from_env()?;
            let address = std::env::var("EXECSEAM_SANDBOX").map_err(|_| {
                Error::invalid_config("EXECSEAM_SANDBOX (the guest's host:port) is not set")
            })?;
            let exec = provider.connect(&address).await?;
            // The guest's files root is /workspace; commands may write anywhere they can.
            return Ok(Target::new("ax", Arc::new(exec))
                .scratch(format!("/tmp/execseam-conformance-{}", std::process::id()))
                .proptest_cases(4)
                .live(true));
        }
        let emulator = AxEmulator::start(EmulatorOptions::default())
            .await
            .map_err(setup)?;
        let endpoint = emulator.endpoint();
        // Through the router path (ate-target-actor), so vanishing the guest is visible as the
        // router's NOT_FOUND; the direct path is covered by the adapter's own tests.
        let provider = AxProvider::new(AxConfig::new().target_actor(PRIMARY_ACTOR))?;
        let exec = provider.connect(&endpoint).await?;
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(setup)?;
            let addr = l.local_addr().map_err(setup)?;
            drop(l);
            AxProvider::new(AxConfig::new())?.attach(&addr.to_string())?
        };
        let gone = AxProvider::new(AxConfig::new().target_actor("execseam/no-such-actor"))?
            .attach(&endpoint)?;
        // The scratch directory: the guest's workspace, as commands see it.
        let scratch = emulator
            .primary()
            .sandbox()
            .visible_path("/workspace/conformance");
        std::fs::create_dir_all(
            emulator
                .primary()
                .sandbox()
                .host_path("/workspace/conformance"),
        )
        .map_err(setup)?;
        let faults = Arc::new(emulator.faults().clone());
        Ok(Target::new("ax", Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(scratch)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(gone))
            .faults(faults)
            .provider(Arc::new(provider))
            .proptest_cases(16)
            .keep_alive(emulator))
    });
}

fn setup(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("ax conformance setup: {e}"))
}
