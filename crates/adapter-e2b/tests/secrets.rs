//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, hyper, h2, rustls, the emulator): everything `log` and `tracing` see at TRACE is
//! captured while the adapter runs commands, streams, times out and meets a cut stream.

use std::time::Duration;

use execseam_core::{Command, Exec, SandboxSpec};
use execseam_e2b::{E2bConfig, E2bProvider};
use execseam_emulators::e2b::E2bEmulator;
use execseam_emulators::{EmulatorOptions, Fault};
use execseam_layers::ExecExt;

const TOKEN: &str = "e2b_s3cr3tapikey0123456789";
const ENV_SECRET: &str = "s3cr3t-env-value-e2b";
const STDIN_SECRET: &str = "s3cr3t-stdin-bytes-e2b";
const OUTPUT_SECRET: &str = "s3cr3t-output-text-e2b";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let log = execseam_test_util::capture::install();
    let emu = E2bEmulator::start(EmulatorOptions {
        token: Some(TOKEN.into()),
        ..EmulatorOptions::default()
    })
    .await
    .unwrap();
    let config = E2bConfig::new(TOKEN)
        .api_url(emu.base_url())
        .sandbox_url(emu.base_url());
    let exec = E2bProvider::new(config)
        .unwrap()
        .create(SandboxSpec::new().with_env("SANDBOX_SECRET", ENV_SECRET))
        .await
        .unwrap();
    let cmd = Command::builder([
        "sh",
        "-c",
        "cat; printf '%s' \"$S\"; printf '%s' \"$1\" >&2",
        "sh",
        OUTPUT_SECRET,
    ])
    .env("S", ENV_SECRET)
    .stdin(STDIN_SECRET)
    .build()
    .unwrap();
    let out = exec.exec(cmd.clone()).await.unwrap();
    assert!(out.stdout.starts_with(STDIN_SECRET.as_bytes()));
    exec.streaming()
        .unwrap()
        .exec_stream(cmd.clone())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let slow = Command::builder(["sh", "-c", "printf '%s' \"$S\"; sleep 30"])
        .env("S", ENV_SECRET)
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
    assert!(exec.exec(cmd).await.is_err());
    drop(exec);
    tokio::time::sleep(Duration::from_millis(300)).await;

    assert!(
        log.has_target("execseam_e2b"),
        "the capture sees the adapter's own records"
    );
    for secret in [TOKEN, ENV_SECRET, STDIN_SECRET, OUTPUT_SECRET] {
        if let Some(line) = log.find(secret.as_bytes()) {
            panic!("{secret:?} reached a log: {line}");
        }
    }
}
