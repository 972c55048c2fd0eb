//! The conformance suite against the Sprites emulator (`cargo xtask conformance --adapter
//! sprites`), or against a sprite it creates with `EXECSEAM_LIVE=1` (`SPRITE_TOKEN`,
//! optionally `SPRITES_API_URL`).

use std::sync::Arc;

use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
use execseam_sprites::{SpritesConfig, SpritesProvider};

fn setup(e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("cannot start the Sprites emulator: {e}"),
    )
}

/// A loopback URL where nothing listens (a port bound, then released).
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = l.local_addr().expect("its address").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").is_ok_and(|v| v == "1") {
            let provider = SpritesProvider::from_env()?;
            let sprite = provider.create(execseam_core::SandboxSpec::new()).await?;
            let scratch = format!("/home/sprite/execseam-conformance-{}", std::process::id());
            return Ok(Target::new("sprites", Arc::new(sprite))
                .provider(Arc::new(provider))
                .scratch(scratch)
                .proptest_cases(8)
                .live(true));
        }
        let emu =
            SpritesEmulator::start_with(EmulatorOptions::default(), SpritesOptions::default())
                .await
                .map_err(setup)?;
        let config = |base: String| SpritesConfig::new(emu.token()).base_url(base);
        let provider = SpritesProvider::new(config(emu.base_url()))?;
        let sprite = provider.connect(DEFAULT_SPRITE).await?;
        let dead = SpritesProvider::new(config(dead_url()))?.attach(DEFAULT_SPRITE)?;
        let gone = provider.attach("no-such-sprite")?;
        let count = emu.sandbox_counter();
        let scratch = emu
            .sprite(DEFAULT_SPRITE)
            .expect("the default sprite")
            .visible_path("/home/sprite/execseam-conformance");
        Ok(Target::new("sprites", Arc::new(sprite))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(scratch)
            .dead_endpoint(Arc::new(dead))
            .vanished_sandbox(Arc::new(gone))
            .faults(Arc::new(emu.faults().clone()))
            .provider(Arc::new(provider))
            .live_sandboxes(count)
            .proptest_cases(16)
            .keep_alive(emu))
    });
}
