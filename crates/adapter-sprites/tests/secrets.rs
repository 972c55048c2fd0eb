//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, the WebSocket client, rustls, the emulator): everything `log` and `tracing` see at
//! TRACE is captured while the adapter runs commands over both transports and streams.

use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator};
use execseam_sprites::{SpritesConfig, SpritesProvider, Transport};
use execseam_test_util::secrets::{self, assert_not_logged};

const TOKEN: &str = "spr_s3cr3ttoken0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let (log, planted, emu): (_, _, SpritesEmulator) = secrets::start("sprites", TOKEN).await;
    for transport in [Transport::WebSocket, Transport::Http] {
        let sprite = SpritesProvider::new(
            SpritesConfig::new(TOKEN)
                .base_url(emu.base_url())
                .transport(transport),
        )
        .unwrap()
        .attach(DEFAULT_SPRITE)
        .expect("a handle");
        planted.run_both_ways(&sprite).await;
    }
    // The env value travels in the URL's query: it must not be logged there either.
    assert_not_logged(&log, &planted.all(&[]));
}
