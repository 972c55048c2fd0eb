//! The conformance suite against the bridge emulator, in both output modes
//! (`cargo xtask conformance --adapter cloudflare`).
//!
//! One binary, two runs: without `EXECSEAM_CLOUDFLARE_MODE` it re-runs itself once per mode
//! (`streaming`, recorded as `docs/conformance/cloudflare.txt`, and `exact`, recorded as
//! `docs/conformance/cloudflare-exact.txt`) and fails if either fails. With the variable set it
//! runs that mode only. With `EXECSEAM_LIVE=1` it runs against the bridge named by
//! `CLOUDFLARE_SANDBOX_WORKER_URL` / `CLOUDFLARE_SANDBOX_API_KEY` (one mode: the variable's).

use std::sync::Arc;

use execseam_cloudflare::config::ENV_MODE;
use execseam_cloudflare::{CloudflareConfig, CloudflareProvider, OutputMode};
use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind};
use execseam_core::{Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::cloudflare::CloudflareEmulator;

fn record_name(mode: OutputMode) -> &'static str {
    match mode {
        OutputMode::Streaming => "cloudflare",
        OutputMode::Exact => "cloudflare-exact",
    }
}

fn setup_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("{what}: {e}"))
}

fn main() {
    let live = std::env::var("EXECSEAM_LIVE").is_ok_and(|v| v == "1");
    let mode = match std::env::var(ENV_MODE) {
        Ok(m) => m.parse::<OutputMode>().expect("EXECSEAM_CLOUDFLARE_MODE"),
        Err(_) if live => OutputMode::Streaming,
        Err(_) => return both_modes(),
    };
    execseam_conformance::main(move || async move {
        if live {
            let provider = CloudflareProvider::new(CloudflareConfig::from_env()?.mode(mode))?;
            let exec = provider.create(SandboxSpec::new()).await?;
            return Ok(Target::new(record_name(mode), Arc::new(exec))
                .provider(Arc::new(provider))
                .scratch("/workspace/execseam-conformance")
                .live(true));
        }
        let emulator = CloudflareEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| setup_error("starting the emulator", e))?;
        let config = CloudflareConfig::new(emulator.base_url())
            .api_key(emulator.token())
            .mode(mode);
        let provider = CloudflareProvider::new(config.clone())?;
        let exec = provider.create(SandboxSpec::new()).await?;

        // Nothing listens on a port that was bound and released.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| setup_error("binding a port", e))?
            .port();
        let dead = CloudflareConfig::new(format!("http://127.0.0.1:{dead_port}"))
            .api_key(emulator.token())
            .mode(mode)
            .verify_sandbox(false);
        let dead = CloudflareProvider::new(dead)?.attach(exec.id())?;

        // A sandbox this adapter connected to, then destroyed: the bridge (and the emulator)
        // gives the id a fresh container, which the adapter's sandbox check reports.
        let gone = provider.create(SandboxSpec::new()).await?;
        gone.set_owned(false);
        if !emulator.destroy_sandbox(gone.id()) {
            return Err(setup_error("destroying a sandbox", "it had no container"));
        }

        let faults = emulator.faults().clone();
        let count = emulator.sandbox_counter();
        Ok(Target::new(record_name(mode), Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch("/workspace/execseam-conformance")
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(gone))
            .faults(Arc::new(faults))
            .provider(Arc::new(provider))
            .live_sandboxes(count)
            .proptest_cases(16)
            .keep_alive(emulator))
    });
}

/// Runs this binary once per mode, passing the arguments through (a name filter).
fn both_modes() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut failed = Vec::new();
    for mode in [OutputMode::Streaming, OutputMode::Exact] {
        println!("=== output mode {} ===", mode.as_str());
        let status = std::process::Command::new(&exe)
            .args(&args)
            .env(ENV_MODE, mode.as_str())
            .status()
            .expect("running the conformance binary");
        if !status.success() {
            failed.push(mode.as_str());
        }
    }
    if !failed.is_empty() {
        eprintln!("conformance failed in mode(s): {}", failed.join(", "));
        std::process::exit(1);
    }
}
