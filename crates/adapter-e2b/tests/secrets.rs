//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, hyper, h2, rustls, the emulator): everything `log` and `tracing` see at TRACE is
//! captured while the adapter runs commands, streams, times out and meets a cut stream.

use std::time::Duration;

use execseam_core::{Command, Exec, SandboxSpec};
use execseam_e2b::{E2bConfig, E2bProvider};
use execseam_emulators::Fault;
use execseam_emulators::e2b::E2bEmulator;
use execseam_layers::ExecExt;
use execseam_test_util::secrets::{self, assert_not_logged};

const TOKEN: &str = "e2b_s3cr3tapikey0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let (log, planted, emu): (_, _, E2bEmulator) = secrets::start("e2b", TOKEN).await;
    let config = E2bConfig::new(TOKEN)
        .api_url(emu.base_url())
        .sandbox_url(emu.base_url());
    let exec = E2bProvider::new(config)
        .unwrap()
        .create(SandboxSpec::new().with_env("SANDBOX_SECRET", &planted.env))
        .await
        .unwrap();
    planted.run_both_ways(&exec).await;
    let slow = Command::builder(["sh", "-c", "printf '%s' \"$S\"; sleep 30"])
        .env("S", &planted.env)
        .build()
        .unwrap();
    assert!(
        (&exec)
            .with_deadline(Duration::from_secs(1))
            .exec(slow)
            .await
            .is_err()
    );
    emu.faults().arm("exec", Fault::CutBeforeExit);
    assert!(exec.exec(planted.command()).await.is_err());
    drop(exec);
    tokio::time::sleep(Duration::from_millis(300)).await;

    assert!(
        log.has_target("execseam_e2b"),
        "the capture sees the adapter's own records"
    );
    assert_not_logged(&log, &planted.all(&[]));
}
