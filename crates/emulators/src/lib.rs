#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Faithful local emulators of sandbox providers' wire protocols.
//!
//! Each provider module (behind a feature of the same name) serves that provider's exec and files
//! surface on loopback, following the published wire format (paths, status codes, headers, field
//! names, framing), and runs the commands for real through [`execseam_local`] in a per-sandbox
//! root (see [`harness::sandbox`]). Every emulator can inject faults deterministically
//! ([`harness::faults`]).
//!
//! The emulators are proven by the providers' own official clients (their SDKs from PyPI or npm)
//! in interop tests, and they are a product: `execseam emulate <provider>` runs one until
//! interrupted and prints the environment an official SDK needs to reach it.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`; both error
// types are large by nature.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;

pub mod capture;
pub mod chaos;
pub mod harness;
pub mod interop;
pub mod probe;

pub use harness::{Fault, FaultHandle, FaultRule, Isolation, Mount, Sandboxing, Server};

// Provider modules. Each adds itself here, behind its feature.
// @providers
#[cfg(feature = "agentcore")]
pub mod agentcore;
#[cfg(feature = "ax")]
pub mod ax;
#[cfg(feature = "chrono")]
pub mod chrono;
#[cfg(feature = "cloudflare")]
pub mod cloudflare;
#[cfg(feature = "daytona")]
pub mod daytona;
#[cfg(feature = "e2b")]
pub mod e2b;
#[cfg(feature = "fly")]
pub mod fly;
#[cfg(feature = "modal")]
pub mod modal;
#[cfg(feature = "northflank")]
pub mod northflank;
#[cfg(feature = "sprites")]
pub mod sprites;
#[cfg(any(feature = "vercel", feature = "northflank"))]
mod stream;
#[cfg(any(feature = "fly", feature = "sprites"))]
mod util;
#[cfg(feature = "vercel")]
pub mod vercel;
#[cfg(any(feature = "northflank", feature = "cloudflare"))]
mod ws;

/// How to start an emulator.
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    /// Where to listen (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Faults armed from the start (`execseam emulate --fault`).
    pub faults: Vec<FaultRule>,
    /// The credential the emulator accepts; `None` accepts any non-empty one.
    pub token: Option<String>,
    /// How sandboxes are made on this host (isolation, bound host paths, state directory).
    pub sandboxing: Sandboxing,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            faults: Vec::new(),
            token: None,
            sandboxing: Sandboxing::default(),
        }
    }
}

/// A running emulator, as the CLI sees it.
pub struct Emulator {
    /// The provider's name.
    pub provider: &'static str,
    /// The base URL the emulator serves.
    pub base_url: String,
    /// Environment variables an official SDK (and our adapter's `from_env`) needs to reach it.
    pub env: Vec<(String, String)>,
    /// Its faults.
    pub faults: FaultHandle,
    /// Keeps the server and the provider's state alive.
    pub guard: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// The providers compiled in.
pub fn providers() -> &'static [&'static str] {
    &[
        // @provider-names
        #[cfg(feature = "e2b")]
        "e2b",
        #[cfg(feature = "daytona")]
        "daytona",
        #[cfg(feature = "fly")]
        "fly",
        #[cfg(feature = "sprites")]
        "sprites",
        #[cfg(feature = "ax")]
        "ax",
        #[cfg(feature = "cloudflare")]
        "cloudflare",
        #[cfg(feature = "agentcore")]
        "agentcore",
        #[cfg(feature = "modal")]
        "modal",
        #[cfg(feature = "chrono")]
        "chrono",
        #[cfg(feature = "vercel")]
        "vercel",
        #[cfg(feature = "northflank")]
        "northflank",
    ]
}

/// Starts the named provider's emulator.
pub async fn start(provider: &str, options: EmulatorOptions) -> std::io::Result<Emulator> {
    let _ = &options;
    match provider {
        // @provider-start
        #[cfg(feature = "e2b")]
        "e2b" => e2b::start(options).await,
        #[cfg(feature = "daytona")]
        "daytona" => daytona::start(options).await,
        #[cfg(feature = "fly")]
        "fly" => fly::start(options).await,
        #[cfg(feature = "sprites")]
        "sprites" => sprites::start(options).await,
        #[cfg(feature = "ax")]
        "ax" => ax::start(options).await,
        #[cfg(feature = "cloudflare")]
        "cloudflare" => cloudflare::start(options).await,
        #[cfg(feature = "agentcore")]
        "agentcore" => agentcore::start(options).await,
        #[cfg(feature = "modal")]
        "modal" => modal::start(options).await,
        #[cfg(feature = "chrono")]
        "chrono" => chrono::start(options).await,
        #[cfg(feature = "vercel")]
        "vercel" => vercel::start(options).await,
        #[cfg(feature = "northflank")]
        "northflank" => northflank::start(options).await,
        other => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "no emulator named {other:?}; compiled in: {:?}",
                providers()
            ),
        )),
    }
}
