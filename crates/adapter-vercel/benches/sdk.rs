//! Exec latency of `true` against the Vercel emulator: this adapter, the official Python SDK
//! (`vercel-sandbox`) and the official TS SDK (`@vercel/sandbox`), measured in alternating
//! rounds of the same run. Each client keeps one sandbox; only the exec is timed (the clients'
//! start-up is not). Prints the medians and the ratios.
//!
//! `cargo bench -p execseam-vercel` (or `cargo xtask bench`). `EXECSEAM_BENCH_SCALE=0.2`
//! shortens it. Installs the pinned clients under `target/interop/` like the interop tests.

use execseam_core::{Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator};
use execseam_test_util::bench;
use execseam_vercel::{VercelConfig, VercelProvider};

/// The adapter, the Python SDK, the TypeScript SDK.
const LABELS: [&str; 3] = [
    "execseam-vercel",
    "vercel-sandbox (Python)",
    "@vercel/sandbox (TS)",
];

fn main() {
    bench::runtime(None).block_on(async move {
        let emu = VercelEmulator::start(EmulatorOptions::default())
            .await
            .expect("emulator");
        let provider = VercelProvider::new(
            VercelConfig::new(emu.token(), TEAM_ID, PROJECT_ID).api_url(emu.base_url()),
        )
        .unwrap();
        let sb = provider.create(SandboxSpec::new()).await.unwrap();
        let sdks = bench::Sdks::install("vercel", emu.env(), 40);
        sdks.compare_true(&sb, "vercel exec `true`", LABELS).await;
        sb.close().await.unwrap();
    });
}
