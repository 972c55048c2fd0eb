//! No token, env value, stdin or output reaches any log at any level, through any dependency
//! (reqwest, the WebSocket client, rustls, the emulator): everything `log` and `tracing` see at
//! TRACE is captured while the adapter runs commands over both transports and streams.

use execseam_core::{Command, Exec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
use execseam_sprites::{SpritesConfig, SpritesProvider, Transport};

const TOKEN: &str = "spr_s3cr3ttoken0123456789";
const ENV_SECRET: &str = "s3cr3t-env-value-sprites";
const STDIN_SECRET: &str = "s3cr3t-stdin-bytes-sprites";
const OUTPUT_SECRET: &str = "s3cr3t-output-text-sprites";

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_any_log_at_trace() {
    let log = execseam_test_util::capture::install();
    let emu = SpritesEmulator::start_with(
        EmulatorOptions {
            token: Some(TOKEN.into()),
            ..EmulatorOptions::default()
        },
        SpritesOptions::default(),
    )
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
    for transport in [Transport::WebSocket, Transport::Http] {
        let sprite = SpritesProvider::new(
            SpritesConfig::new(TOKEN)
                .base_url(emu.base_url())
                .transport(transport),
        )
        .unwrap()
        .attach(DEFAULT_SPRITE)
        .expect("a handle");
        let out = sprite.exec(cmd.clone()).await.unwrap();
        assert!(out.stdout.starts_with(STDIN_SECRET.as_bytes()), "{out:?}");
        if let Some(s) = sprite.streaming() {
            s.exec_stream(cmd.clone())
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
        }
    }
    assert!(!log.is_empty(), "the capture sees records");
    // The env value travels in the URL's query: it must not be logged there either.
    for secret in [TOKEN, ENV_SECRET, STDIN_SECRET, OUTPUT_SECRET] {
        if let Some(line) = log.find(secret.as_bytes()) {
            panic!("{secret:?} reached a log: {line}");
        }
    }
}
