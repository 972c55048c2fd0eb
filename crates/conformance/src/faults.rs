//! The fault vocabulary: what an emulator can be asked to inject, and the injector the fault
//! cases drive ([`Faults`]).
//!
//! The suite owns these names; emulators implement them (`execseam-emulator-kit`'s fault handle
//! is a [`Faults`]), and an emulator that cannot render a fault says so, with its reason, so the
//! case is reported not applicable rather than passed or failed. Nothing here depends on an
//! emulator: an outside adapter author gets the suite without any emulator's dependencies.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A fault to inject.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 429 (or the protocol's equivalent) with `Retry-After: <secs>`.
    RateLimited {
        /// The retry-after to send, in seconds.
        retry_after_secs: u64,
    },
    /// HTTP 500. On an exec route the command runs first (it "may have run").
    ServerError,
    /// HTTP 503 (or gRPC UNAVAILABLE).
    Unavailable,
    /// Reset the connection before any response byte.
    ResetBeforeResponse,
    /// Cut the response stream before its exit frame.
    CutBeforeExit,
    /// Send a malformed body or frame.
    MalformedBody,
    /// Delay the response, then serve it normally.
    Latency(Duration),
    /// Reject the credentials.
    AuthFailure,
    /// Destroy the sandbox while the command runs.
    SandboxVanishes,
}

impl Fault {
    /// The fault's name in rules, without its argument (`"429"`, `"latency"`, …; one of
    /// [`FAULT_NAMES`]).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::RateLimited { .. } => "429",
            Fault::ServerError => "500",
            Fault::Unavailable => "503",
            Fault::ResetBeforeResponse => "reset",
            Fault::CutBeforeExit => "cut",
            Fault::MalformedBody => "malformed",
            Fault::Latency(_) => "latency",
            Fault::AuthFailure => "auth",
            Fault::SandboxVanishes => "vanish",
        }
    }
}

/// Every fault's name ([`Fault::name`]).
pub const FAULT_NAMES: &[&str] = &[
    "429",
    "500",
    "503",
    "reset",
    "cut",
    "malformed",
    "latency",
    "auth",
    "vanish",
];

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::RateLimited { retry_after_secs } => write!(f, "rate-limited:{retry_after_secs}"),
            Fault::ServerError => f.write_str("500"),
            Fault::Unavailable => f.write_str("503"),
            Fault::ResetBeforeResponse => f.write_str("reset"),
            Fault::CutBeforeExit => f.write_str("cut"),
            Fault::MalformedBody => f.write_str("malformed"),
            Fault::Latency(d) => write!(f, "latency:{}", d.as_millis()),
            Fault::AuthFailure => f.write_str("auth"),
            Fault::SandboxVanishes => f.write_str("vanish"),
        }
    }
}

impl FromStr for Fault {
    type Err = String;

    /// `429[:secs]`/`rate-limited[:secs]`, `500`/`server-error`, `503`/`unavailable`, `reset`,
    /// `cut`, `malformed`, `latency:<ms>`, `auth`, `vanish`.
    fn from_str(s: &str) -> Result<Fault, String> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let num = |default: u64| -> Result<u64, String> {
            arg.map_or(Ok(default), |a| {
                a.trim_end_matches("ms")
                    .parse()
                    .map_err(|_| format!("bad number {a:?} in fault {s:?}"))
            })
        };
        Ok(match name {
            "429" | "rate-limited" => Fault::RateLimited {
                retry_after_secs: num(1)?,
            },
            "500" | "server-error" => Fault::ServerError,
            "503" | "unavailable" => Fault::Unavailable,
            "reset" => Fault::ResetBeforeResponse,
            "cut" => Fault::CutBeforeExit,
            "malformed" => Fault::MalformedBody,
            "latency" => Fault::Latency(Duration::from_millis(num(500)?)),
            "auth" => Fault::AuthFailure,
            "vanish" => Fault::SandboxVanishes,
            _ => {
                return Err(format!(
                    "unknown fault {s:?}: want 429[:secs], 500, 503, reset, cut, malformed, latency:<ms>, auth or vanish"
                ));
            }
        })
    }
}

/// Fault injection, provided by an emulator (or a real backend that can cause some faults) for
/// a conformance run.
pub trait Faults: Send + Sync {
    /// Arms `fault` for the next request that submits a command. `Err` says why this target
    /// cannot inject it; the case is then reported not applicable with that reason.
    fn inject(&self, fault: Fault) -> Result<(), String>;
    /// Disarms anything still armed.
    fn clear(&self);
    /// How many command-submitting requests the emulator has received, if it counts them (used to
    /// prove that a failed exec is never re-submitted).
    fn exec_requests(&self) -> Option<u64> {
        None
    }
}

/// The reason [`Faults::inject`] gives for a fault the target cannot cause at all.
pub fn cannot_inject(fault: Fault) -> String {
    format!("the emulator cannot inject {fault:?}")
}
