//! Exec latency of `true` against the Northflank emulator: this adapter, the official Python SDK
//! (`northflank`, `run_service_command`) and the official JS client (`@northflank/js-client`,
//! `execServiceCommand`), measured in alternating rounds of the same run. Every exec is one
//! WebSocket on every client; only the exec is timed. Prints the medians and the ratios.
//!
//! `cargo bench -p execseam-northflank` (or `cargo xtask bench`). `EXECSEAM_BENCH_SCALE=0.2`
//! shortens it. Installs the pinned clients under `target/interop/` like the interop tests.

use execseam_emulators::EmulatorOptions;
use execseam_emulators::northflank::{NorthflankEmulator, PROJECT_ID, SERVICE_ID};
use execseam_northflank::{NorthflankConfig, NorthflankProvider};
use execseam_test_util::bench;

/// The adapter, the Python SDK, the TypeScript SDK.
const LABELS: [&str; 3] = [
    "execseam-northflank",
    "northflank (Python)",
    "@northflank/js-client",
];

fn main() {
    bench::runtime(None).block_on(async move {
        let emu = NorthflankEmulator::start(EmulatorOptions::default())
            .await
            .expect("emulator");
        let provider = NorthflankProvider::new(
            NorthflankConfig::new(emu.token(), PROJECT_ID).api_url(emu.base_url()),
        )
        .unwrap();
        let sb = provider.connect(SERVICE_ID).await.unwrap();
        let sdks = bench::Sdks::install("northflank", emu.env(), 40);
        sdks.compare_true(&sb, "northflank exec `true`", LABELS)
            .await;
    });
}
