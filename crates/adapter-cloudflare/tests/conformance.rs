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
use execseam_cloudflare::{CloudflareConfig, CloudflareExec, OutputMode};
use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind};
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
            let config = CloudflareConfig::from_env()?.mode(mode);
            let exec = CloudflareExec::connect(config).await?;
            return Ok(Target::new(record_name(mode), Arc::new(exec))
                .scratch("/workspace/execseam-conformance")
                .live(true));
        }
        let emulator = CloudflareEmulator::start(EmulatorOptions::default())
            .await
            .map_err(|e| setup_error("starting the emulator", e))?;
        let config = CloudflareConfig::new(emulator.base_url())
            .api_key(emulator.token())
            .mode(mode);
        let exec = CloudflareExec::connect(config.clone()).await?;

        // Nothing listens on a port that was bound and released.
        let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| setup_error("binding a port", e))?
            .port();
        let dead = CloudflareConfig::new(format!("http://127.0.0.1:{dead_port}"))
            .api_key(emulator.token())
            .mode(mode)
            .sandbox_id(exec.sandbox_id())
            .verify_sandbox(false);
        let dead = CloudflareExec::connect(dead).await?;

        // A sandbox this adapter connected to, then destroyed: the bridge (and the emulator)
        // gives the id a fresh container, which the adapter's sandbox check reports.
        let gone = CloudflareExec::connect(config).await?;
        if !emulator.destroy_sandbox(gone.sandbox_id()) {
            return Err(setup_error("destroying a sandbox", "it had no container"));
        }

        let faults = emulator.faults().clone();
        Ok(Target::new(record_name(mode), Arc::new(exec))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch("/workspace/execseam-conformance")
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(gone))
            .faults(Arc::new(faults))
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
