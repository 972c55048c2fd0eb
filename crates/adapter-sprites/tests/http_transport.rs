//! The whole conformance suite over the HTTP `POST /exec` fallback (not the committed record,
//! which is the WebSocket transport's).
//!
//! The POST body's frames carry no length: a client can only take each HTTP chunk as a frame, and
//! hyper (like any HTTP client) hands a large chunk over in pieces. So over this transport
//! high-volume output fails, and must fail *detectably*: every case passes or is not applicable,
//! except cases that move more than one read buffer of output, which must end in
//! `Err(Protocol)` naming the lost chunk boundaries, never in an `Ok` with wrong bytes.

use std::sync::Arc;

use execseam_conformance::{Outcome, Target};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
use execseam_sprites::{SpritesConfig, SpritesProvider, Transport};

#[test]
fn over_http_post_every_case_passes_or_fails_detectably() {
    execseam_conformance::block_on(async {
        let emu =
            SpritesEmulator::start_with(EmulatorOptions::default(), SpritesOptions::default())
                .await
                .expect("the emulator starts");
        let provider = SpritesProvider::new(
            SpritesConfig::new(emu.token())
                .base_url(emu.base_url())
                .transport(Transport::Http),
        )
        .unwrap();
        let sprite = provider.attach(DEFAULT_SPRITE).expect("a handle");
        let gone = provider.attach("no-such-sprite").expect("a handle");
        let scratch = emu
            .sprite(DEFAULT_SPRITE)
            .unwrap()
            .visible_path("/home/sprite/execseam-conformance-http");
        let faults = Arc::new(emu.faults().clone());
        let target = Target::new("sprites-http", Arc::new(sprite))
            .scratch(scratch)
            .vanished_sandbox(Arc::new(gone))
            .faults(faults)
            .proptest_cases(8)
            .keep_alive(emu);
        let report = execseam_conformance::run(&target, None).await;
        let wrong: Vec<_> = report
            .cases
            .iter()
            .filter(|c| match &c.outcome {
                Outcome::Fail(why) => {
                    !(why.contains("protocol error") && why.contains("chunk boundaries lost"))
                }
                _ => false,
            })
            .map(|c| format!("{}: {}", c.name, c.outcome))
            .collect();
        assert!(
            wrong.is_empty(),
            "failed otherwise than detectably:\n{}",
            wrong.join("\n")
        );
        // Everything that moves little output passes, faults included.
        for name in [
            "exit-code-is-a-result",
            "stdout-stderr-separate",
            "missing-program",
            "no-stdin-is-eof",
            "argv-roundtrip",
            "workdir-honoured",
            "workdir-missing",
            "env-honoured",
            "env-baseline",
            "kill-is-ambiguous",
            "concurrent-execs-isolated",
            "vanished-sandbox-is-an-error",
            "fault-server-error",
            "fault-connection-reset",
            "fault-stream-cut",
            "fault-malformed-body",
            "fault-no-duplicate-execution",
            "fault-sandbox-vanishes",
        ] {
            assert_eq!(report.outcome(name), Some(&Outcome::Pass), "{name}");
        }
        println!("over HTTP POST: {}", report.summary());
    });
}
