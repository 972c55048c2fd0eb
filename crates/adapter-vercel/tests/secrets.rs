//! No token, env value, stdin, output or file content reaches any log at any level, through any
//! dependency (reqwest, hyper, rustls, the emulator): everything `log` and `tracing` see at
//! TRACE is captured while the adapter creates a sandbox, runs commands both ways, streams, and
//! writes and reads a file (issue 24, defect 10).

use execseam_core::{Sandbox, SandboxSpec};
use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator};
use execseam_test_util::secrets::{self, assert_not_logged};
use execseam_vercel::{VercelConfig, VercelProvider};

const TOKEN: &str = "vc-s3cr3tapitoken0123456789";
const FILE_SECRET: &str = "s3cr3t-file-content-vercel";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let (log, planted, emu): (_, _, VercelEmulator) = secrets::start("vercel", TOKEN).await;
    let provider =
        VercelProvider::new(VercelConfig::new(TOKEN, TEAM_ID, PROJECT_ID).api_url(emu.base_url()))
            .unwrap();
    let exec = provider.create(SandboxSpec::new()).await.unwrap();
    let (out, streamed) = planted.run_both_ways(&exec).await;
    planted.assert_exact(&out);
    assert_eq!(streamed, Some(out));
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

    assert_not_logged(&log, &planted.all(&[FILE_SECRET]));
}
