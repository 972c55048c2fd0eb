//! Configuration of [`AxExec`](crate::AxExec).

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use std::time::Duration;

use execseam_core::Error;

use crate::error::PROVIDER;

/// The port google/ax serves the guest services on (`ax ssh`, the runner contract).
pub const AX_PORT: u16 = 80;
/// The env library's own default port (`guest.DefaultPort`).
pub const ENV_LIBRARY_PORT: u16 = 8080;
/// The guest's default per-stream spool limit (10 MiB); output beyond it is discarded by the guest.
pub const GUEST_MAX_LOG_BYTES: u64 = 10 * 1024 * 1024;
/// The guest's default watchdog (`DefaultProcessTimeout`, 1 h: agent-substrate/env
/// `guest/process/tracker.go`).
pub const GUEST_PROCESS_TIMEOUT: Duration = Duration::from_secs(3600);

/// Environment variable (optional): `<atespace>/<actor>`, sent as `ate-target-actor` to route
/// through the Substrate router.
pub const ENV_TARGET_ACTOR: &str = "AX_TARGET_ACTOR";

/// How to reach one guest and how patient to be with it (nothing in it is secret: the guest API
/// has no credentials).
#[derive(Clone, Debug)]
pub struct AxConfig {
    pub(crate) target_actor: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_message_size: usize,
    pub(crate) max_log_bytes: u64,
    pub(crate) max_resumes: u32,
    pub(crate) exit_poll_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) process_timeout: Duration,
}

/// Parses a guest address: `host:port`, `http://host:port`, or a bare host (port 80, as AX), into
/// `http://host:port`. The guest services are plain-text gRPC (h2c): `https://` is refused.
pub(crate) fn parse_endpoint(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    if raw.starts_with("https://") {
        return Err(format!(
            "endpoint {raw:?}: the guest services are plain-text gRPC (h2c); TLS is not supported"
        ));
    }
    let rest = raw.strip_prefix("http://").unwrap_or(raw);
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains(char::is_whitespace) {
        return Err(format!(
            "endpoint {raw:?} is not host[:port] or http://host[:port]"
        ));
    }
    let has_port = match rest.rsplit_once(':') {
        // `[::1]:80` or `host:80`; a bare IPv6 literal needs brackets.
        Some((host, port)) => {
            if port.parse::<u16>().is_err() || host.is_empty() {
                return Err(format!("endpoint {raw:?} has no valid port"));
            }
            true
        }
        None => false,
    };
    Ok(if has_port {
        format!("http://{rest}")
    } else {
        format!("http://{rest}:{AX_PORT}")
    })
}

impl Default for AxConfig {
    fn default() -> Self {
        AxConfig::new()
    }
}

impl AxConfig {
    /// The defaults: no routing target, AX's timeouts and limits. The guest is not
    /// configuration: it is [`AxProvider::connect`](crate::AxProvider::connect)'s argument.
    pub fn new() -> AxConfig {
        AxConfig {
            target_actor: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            max_message_size: 16 * 1024 * 1024,
            max_log_bytes: GUEST_MAX_LOG_BYTES,
            max_resumes: 5,
            exit_poll_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(30),
            process_timeout: GUEST_PROCESS_TIMEOUT,
        }
    }

    /// Reads [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<AxConfig, Error> {
        crate::Ax::config_from(&vars::env)
    }

    /// Reads [`ENV_TARGET_ACTOR`] (optional) as `vars` gives it. A malformed value is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<AxConfig, Error> {
        let mut config = AxConfig::new();
        if let Some(actor) = vars.text(ENV_TARGET_ACTOR) {
            config = config.target_actor(actor);
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks what can be wrong before any I/O.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if let Some(actor) = &self.target_actor
            && (actor.is_empty()
                || !actor.is_ascii()
                || actor.bytes().any(|b| b.is_ascii_control()))
        {
            return Err(vars::config_error(
                PROVIDER,
                format!("target actor {actor:?} is not printable ASCII (<atespace>/<actor>)"),
            ));
        }
        if self.process_timeout.is_zero() {
            return Err(vars::config_error(
                PROVIDER,
                "process_timeout is zero: the guest would read it as its default",
            ));
        }
        Ok(())
    }

    execseam_adapter_kit::setters! {
        /// Routes every call through the Substrate router to `<atespace>/<actor>` (metadata
        /// `ate-target-actor`).
        target_actor: some into String,
        /// How long to wait for a TCP connection (default 5 s).
        connect_timeout: Duration,
        /// The deadline of each unary call and file transfer (default 30 s); output streams have
        /// none (the command runs as long as it runs; HTTP/2 keepalive detects dead connections).
        request_timeout: Duration,
        /// The largest gRPC message accepted (default 16 MiB: the guest sends each spool delta as one
        /// message, up to its 10 MiB limit plus a marker).
        max_message_size: usize,
        /// The guest's per-stream spool limit (default 10 MiB, the env library's `MaxLogBytes`).
        /// Output that reaches it with the guest's truncation marker is an `OutputLimit` error.
        max_log_bytes: u64,
        /// How many consecutive failed output streams (without progress) are resumed before the
        /// exec fails (default 5).
        max_resumes: u32,
        /// How long an output stream may stay silent (no message, or a message that does not
        /// complete) before the adapter asks the guest whether the process still runs (`GetProcess`,
        /// bounded by the request timeout): if it runs, the stream is waited on again (a silent
        /// command is not an error); if it exited, the output is read again from the offsets; if the
        /// guest does not answer, the exec is `Err(Timeout(Request))`, `Retry::Unsafe`. Opening a
        /// stream is bounded by the request timeout. Default 30 s.
        idle_timeout: Duration,
        /// How long the poll for an exit may go on after a stream ended without the exit message,
        /// while the process still runs (default 1 h, the guest's own default process timeout).
        exit_poll_timeout: Duration,
        /// The guest's watchdog for each command this adapter starts (`StartProcessRequest.timeout`;
        /// default 1 h, the guest's own default): at it the guest SIGKILLs the command's process
        /// group. Such an end is `Timeout(Deadline::Command)` (`Retry::Never`), never the exit 137
        /// the guest reports; telling it apart takes this value, so every client of a guest's
        /// handles should use the same one. Zero is refused (the guest reads it as its default).
        process_timeout: Duration,
    }

    /// The routing target, if any.
    pub fn actor(&self) -> Option<&str> {
        self.target_actor.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(parse_endpoint("10.0.0.7").unwrap(), "http://10.0.0.7:80");
        assert_eq!(
            parse_endpoint("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(parse_endpoint("[::1]:9000").unwrap(), "http://[::1]:9000");
        for bad in ["https://x:443", "", "x:notaport", "http://x/y", "a b:80"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
        assert!(AxConfig::new().target_actor("ns/a\nb").validate().is_err());
    }
}
