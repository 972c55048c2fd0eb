//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, hyper, the WebSocket client, rustls, the emulator): everything `log` and
//! `tracing` see at TRACE is captured while the adapter runs commands both ways and streams.

use execseam_core::{Command, Exec, SandboxSpec};
use execseam_daytona::{DaytonaConfig, DaytonaProvider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::daytona::DaytonaEmulator;

const TOKEN: &str = "dtn_s3cr3tapikey0123456789";
const ENV_SECRET: &str = "s3cr3t-env-value-daytona";
const STDIN_SECRET: &str = "s3cr3t-stdin-bytes-daytona";
const OUTPUT_SECRET: &str = "s3cr3t-output-text-daytona";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let log = execseam_test_util::capture::install();
    let emu = DaytonaEmulator::start(EmulatorOptions {
        token: Some(TOKEN.into()),
        ..EmulatorOptions::default()
    })
    .await
    .unwrap();
    let exec = DaytonaProvider::new(DaytonaConfig::new(TOKEN).api_url(emu.api_url()))
        .unwrap()
        .create(SandboxSpec::new())
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
    assert!(out.stdout.starts_with(STDIN_SECRET.as_bytes()), "{out:?}");
    let streamed = exec
        .streaming()
        .unwrap()
        .exec_stream(cmd)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(streamed, out);
    drop(exec);

    assert!(!log.is_empty(), "the capture sees records");
    for secret in [TOKEN, ENV_SECRET, STDIN_SECRET, OUTPUT_SECRET] {
        if let Some(line) = log.find(secret.as_bytes()) {
            panic!("{secret:?} reached a log: {line}");
        }
    }
}
