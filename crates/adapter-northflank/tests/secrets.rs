//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, hyper, the WebSocket client, rustls, the emulator): everything `log` and `tracing`
//! see at TRACE is captured while the adapter runs commands both ways and streams (issue 24,
//! defect 10). The token travels inside the `init` frame and stdin in `payload` frames, so a
//! WebSocket crate that logs frames (tungstenite does, at TRACE through `log`) fails this test.

use execseam_core::{Command, Exec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::northflank::{
    NorthflankEmulator, NorthflankOptions, PROJECT_ID, SERVICE_ID,
};
use execseam_northflank::{NorthflankConfig, NorthflankProvider};

const TOKEN: &str = "nf-s3cr3tapitoken0123456789";
const ENV_SECRET: &str = "s3cr3t-env-value-northflank";
const STDIN_SECRET: &str = "s3cr3t-stdin-bytes-northflank";
const OUTPUT_SECRET: &str = "s3cr3t-output-text-northflank";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let log = execseam_test_util::capture::install();
    let emu = NorthflankEmulator::start_with(
        EmulatorOptions {
            token: Some(TOKEN.into()),
            ..EmulatorOptions::default()
        },
        NorthflankOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(emu.token(), TOKEN);
    let provider =
        NorthflankProvider::new(NorthflankConfig::new(TOKEN, PROJECT_ID).api_url(emu.base_url()))
            .unwrap();
    let exec = provider.connect(SERVICE_ID).await.unwrap();
    // env is shell-wrapped here: the value travels in the init frame's argv.
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
    assert_eq!(
        out.stdout,
        format!("{STDIN_SECRET}{ENV_SECRET}").as_bytes(),
        "{out:?}"
    );
    assert_eq!(out.stderr, OUTPUT_SECRET.as_bytes(), "{out:?}");
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
