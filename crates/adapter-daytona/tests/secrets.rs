//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, hyper, the WebSocket client, rustls, the emulator): everything `log` and
//! `tracing` see at TRACE is captured while the adapter runs commands both ways and streams.

use execseam_core::SandboxSpec;
use execseam_daytona::{DaytonaConfig, DaytonaProvider};
use execseam_emulators::daytona::DaytonaEmulator;
use execseam_test_util::secrets::{self, assert_not_logged};

const TOKEN: &str = "dtn_s3cr3tapikey0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let (log, planted, emu): (_, _, DaytonaEmulator) = secrets::start("daytona", TOKEN).await;
    let exec = DaytonaProvider::new(DaytonaConfig::new(TOKEN).api_url(emu.api_url()))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let (out, streamed) = planted.run_both_ways(&exec).await;
    assert_eq!(streamed, Some(out));
    drop(exec);

    assert_not_logged(&log, &planted.all(&[]));
}
