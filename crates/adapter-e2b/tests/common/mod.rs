//! Set-up the E2B adapter's tests share: the emulator, and a config pointing at it.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use execseam_e2b::E2bConfig;
use execseam_emulators::EmulatorOptions;
use execseam_emulators::e2b::E2bEmulator;

pub async fn emulator() -> E2bEmulator {
    E2bEmulator::start(EmulatorOptions::default())
        .await
        .expect("the emulator starts")
}

/// The emulator's API key, with its control plane and envd at its base URL.
pub fn config(emu: &E2bEmulator) -> E2bConfig {
    E2bConfig::new(emu.api_key())
        .api_url(emu.base_url())
        .sandbox_url(emu.base_url())
}
