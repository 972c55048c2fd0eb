#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Faithful local emulators of sandbox providers' wire protocols.
//!
//! Each provider's emulator is a crate of its own (`execseam-emulator-<provider>`, re-exported
//! here behind a feature of the same name) that implements the kit's
//! [`Provider`](execseam_emulator_kit::Provider): it serves that provider's exec and files surface
//! on loopback, following the published wire format (paths, status codes, headers, field names,
//! framing), and runs the commands for real in a per-sandbox root (see
//! [`execseam_emulator_kit::sandbox`]). Every emulator can inject the faults of its declared
//! table deterministically ([`execseam_emulator_kit::faults`]).
//!
//! [`ALL`] is the one table of emulators: `execseam emulate`, the generic emulated-target path of
//! the conformance suite, the reliability suite and the benchmarks read it.
//!
//! The emulators are proven by the providers' own official clients (their SDKs from PyPI or npm)
//! in interop tests, and they are a product: `execseam emulate <provider>` runs one until
//! interrupted and prints the environment an official SDK needs to reach it.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`; both error
// types are large by nature.
#![allow(clippy::result_large_err)]

pub use execseam_emulator_kit as kit;
pub use execseam_emulator_kit::{
    AnyEmulator, Emulator, EmulatorOptions, Entry, Fault, FaultHandle, FaultRule, Isolation, Mount,
    Provider, RecordedRequest, Sandboxing, Server,
};

// Provider crates, each behind its feature.
#[cfg(feature = "agentcore")]
pub use execseam_emulator_agentcore as agentcore;
#[cfg(feature = "ax")]
pub use execseam_emulator_ax as ax;
#[cfg(feature = "chrono")]
pub use execseam_emulator_chrono as chrono;
#[cfg(feature = "cloudflare")]
pub use execseam_emulator_cloudflare as cloudflare;
#[cfg(feature = "daytona")]
pub use execseam_emulator_daytona as daytona;
#[cfg(feature = "e2b")]
pub use execseam_emulator_e2b as e2b;
#[cfg(feature = "fly")]
pub use execseam_emulator_fly as fly;
#[cfg(feature = "kubernetes")]
pub use execseam_emulator_kubernetes as kubernetes;
#[cfg(feature = "modal")]
pub use execseam_emulator_modal as modal;
#[cfg(feature = "northflank")]
pub use execseam_emulator_northflank as northflank;
#[cfg(feature = "sprites")]
pub use execseam_emulator_sprites as sprites;
#[cfg(feature = "vercel")]
pub use execseam_emulator_vercel as vercel;

/// Every emulator compiled in, by provider name: adding emulator N+1 is one line here (and its
/// dependency).
pub const ALL: &[Entry] = &[
    #[cfg(feature = "agentcore")]
    Entry::of::<agentcore::AgentCore>(),
    #[cfg(feature = "ax")]
    Entry::of::<ax::Ax>(),
    #[cfg(feature = "chrono")]
    Entry::of::<chrono::Chrono>(),
    #[cfg(feature = "cloudflare")]
    Entry::of::<cloudflare::Cloudflare>(),
    #[cfg(feature = "daytona")]
    Entry::of::<daytona::Daytona>(),
    #[cfg(feature = "e2b")]
    Entry::of::<e2b::E2b>(),
    #[cfg(feature = "fly")]
    Entry::of::<fly::Fly>(),
    #[cfg(feature = "modal")]
    Entry::of::<modal::Modal>(),
    #[cfg(feature = "northflank")]
    Entry::of::<northflank::Northflank>(),
    #[cfg(feature = "sprites")]
    Entry::of::<sprites::Sprites>(),
    #[cfg(feature = "vercel")]
    Entry::of::<vercel::Vercel>(),
    #[cfg(feature = "kubernetes")]
    Entry::of::<kubernetes::Kubernetes>(),
];

/// The names of the emulators compiled in.
pub fn providers() -> Vec<&'static str> {
    ALL.iter().map(|e| e.name).collect()
}

/// The table row of `provider`.
pub fn entry(provider: &str) -> Option<&'static Entry> {
    ALL.iter().find(|e| e.name == provider)
}

/// Starts the named provider's emulator with its default options.
pub async fn start(provider: &str, options: EmulatorOptions) -> std::io::Result<AnyEmulator> {
    let Some(entry) = entry(provider) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "no emulator named {provider:?}; compiled in: {}",
                providers().join(", ")
            ),
        ));
    };
    (entry.start)(options).await
}
