//! No token, env value, stdin, output or file content reaches any log at any level, through any
//! dependency (reqwest, hyper, rustls, the emulator): everything `log` and `tracing` see at
//! TRACE is captured while the adapter creates a sandbox, runs commands both ways, streams, and
//! writes and reads a file (issue 24, defect 10).

use execseam_core::{Command, Exec, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator, VercelOptions};
use execseam_vercel::{VercelConfig, VercelProvider};

const TOKEN: &str = "vc-s3cr3tapitoken0123456789";
const ENV_SECRET: &str = "s3cr3t-env-value-vercel";
const STDIN_SECRET: &str = "s3cr3t-stdin-bytes-vercel";
const OUTPUT_SECRET: &str = "s3cr3t-output-text-vercel";
const FILE_SECRET: &str = "s3cr3t-file-content-vercel";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let log = execseam_test_util::capture::install();
    let emu = VercelEmulator::start_with(
        EmulatorOptions {
            token: Some(TOKEN.into()),
            ..EmulatorOptions::default()
        },
        VercelOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(emu.token(), TOKEN);
    let provider =
        VercelProvider::new(VercelConfig::new(TOKEN, TEAM_ID, PROJECT_ID).api_url(emu.base_url()))
            .unwrap();
    let exec = provider.create(SandboxSpec::new()).await.unwrap();
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
    exec.write_files(&[("secret.txt", FILE_SECRET.as_bytes(), 0o600)])
        .await
        .unwrap();
    let back = exec
        .read_file("/vercel/sandbox/secret.txt")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, FILE_SECRET.as_bytes());
    exec.close().await.unwrap();

    assert!(!log.is_empty(), "the capture sees records");
    for secret in [TOKEN, ENV_SECRET, STDIN_SECRET, OUTPUT_SECRET, FILE_SECRET] {
        if let Some(line) = log.find(secret.as_bytes()) {
            panic!("{secret:?} reached a log: {line}");
        }
    }
}
