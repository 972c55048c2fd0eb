//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, hyper, the WebSocket client, rustls, the emulator): everything `log` and `tracing`
//! see at TRACE is captured while the adapter runs commands both ways and streams (issue 24,
//! defect 10). The token travels inside the `init` frame and stdin in `payload` frames, so a
//! WebSocket crate that logs frames (tungstenite does, at TRACE through `log`) fails this test.

use execseam_emulators::northflank::{NorthflankEmulator, PROJECT_ID, SERVICE_ID};
use execseam_northflank::{NorthflankConfig, NorthflankProvider};
use execseam_test_util::secrets::{self, assert_not_logged};

const TOKEN: &str = "nf-s3cr3tapitoken0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let (log, planted, emu): (_, _, NorthflankEmulator) = secrets::start("northflank", TOKEN).await;
    let provider =
        NorthflankProvider::new(NorthflankConfig::new(TOKEN, PROJECT_ID).api_url(emu.base_url()))
            .unwrap();
    let exec = provider.connect(SERVICE_ID).await.unwrap();
    // env is shell-wrapped here: the value travels in the init frame's argv.
    let (out, streamed) = planted.run_both_ways(&exec).await;
    planted.assert_exact(&out);
    assert_eq!(streamed, Some(out));
    drop(exec);

    assert_not_logged(&log, &planted.all(&[]));
}
