//! Configuration of the Cloudflare adapter, and [`CloudflareConfig::from_env`].

use std::path::PathBuf;
use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::attached::TerminalMode;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
#[cfg(test)]
use execseam_core::ErrorKind;
use secrecy::{ExposeSecret, SecretString};

/// The bridge Worker's URL (for example `https://sandbox-bridge.<account>.workers.dev`).
pub const ENV_WORKER_URL: &str = "CLOUDFLARE_SANDBOX_WORKER_URL";
/// The bridge's `SANDBOX_API_KEY` (the same variable the OpenAI Agents SDK reads).
pub const ENV_API_KEY: &str = "CLOUDFLARE_SANDBOX_API_KEY";
/// A bridge session id, sent as `Session-Id` on every request (optional).
pub const ENV_SESSION_ID: &str = "CLOUDFLARE_SANDBOX_SESSION_ID";
/// `streaming` (the default) or `exact`; see [`OutputMode`].
pub const ENV_MODE: &str = "EXECSEAM_CLOUDFLARE_MODE";
/// Where snapshots are kept on this host; see [`CloudflareConfig::snapshot_dir`].
pub const ENV_SNAPSHOT_DIR: &str = "EXECSEAM_CLOUDFLARE_SNAPSHOT_DIR";

/// The default [`CloudflareConfig::stream_idle_timeout`].
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// How the adapter obtains a command's stdout and stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OutputMode {
    /// Read them from the exec SSE stream as they come (the default). The bridge decodes the
    /// command's output as UTF-8 text before re-encoding it as base64, so bytes that are not
    /// valid UTF-8 arrive as U+FFFD: `Capabilities::binary_output` is false in this mode.
    #[default]
    Streaming,
    /// Redirect them to two files under `/workspace/.execseam/` and fetch those raw with the
    /// files API after the exit: byte-exact, but nothing arrives before the command ends (no
    /// streaming), and each command costs three more requests (two file reads and a clean-up).
    Exact,
}

impl OutputMode {
    /// `streaming` or `exact`.
    pub fn as_str(&self) -> &'static str {
        match self {
            OutputMode::Streaming => "streaming",
            OutputMode::Exact => "exact",
        }
    }
}

impl std::str::FromStr for OutputMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<OutputMode, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "streaming" | "stream" => Ok(OutputMode::Streaming),
            "exact" => Ok(OutputMode::Exact),
            other => Err(vars::config_error(
                crate::PROVIDER,
                format!("{ENV_MODE}={other:?}: want `streaming` or `exact`"),
            )),
        }
    }
}

/// The default [`CloudflareConfig::max_answer_bytes`]: 16 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 16 << 20;

/// Configuration of [`CloudflareExec`](crate::CloudflareExec). `Debug` never prints the API key.
#[derive(Clone, Debug)]
pub struct CloudflareConfig {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<SecretString>,
    pub(crate) api_prefix: String,
    pub(crate) session_id: Option<String>,
    pub(crate) mode: OutputMode,
    pub(crate) command_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) stream_idle_timeout: Duration,
    pub(crate) verify_sandbox: bool,
    pub(crate) connect_attempts: u32,
    pub(crate) max_answer_bytes: usize,
    pub(crate) terminal: TerminalMode,
    pub(crate) snapshot_dir: Option<PathBuf>,
}

impl CloudflareConfig {
    /// A configuration for the bridge Worker at `base_url`, with no API key (a bridge without
    /// `SANDBOX_API_KEY` skips authentication).
    pub fn new(base_url: impl Into<String>) -> CloudflareConfig {
        CloudflareConfig {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            api_prefix: "/v1".into(),
            session_id: None,
            mode: OutputMode::Streaming,
            command_timeout: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            verify_sandbox: true,
            connect_attempts: 4,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            terminal: TerminalMode::Recorder,
            snapshot_dir: None,
        }
    }

    /// Reads the variables in [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<CloudflareConfig, Error> {
        crate::Cloudflare::config_from(&vars::env)
    }

    /// Reads [`VARS`](crate::VARS) as `vars` gives them: `CLOUDFLARE_SANDBOX_WORKER_URL`
    /// (required), `CLOUDFLARE_SANDBOX_API_KEY`, `CLOUDFLARE_SANDBOX_SESSION_ID`,
    /// `EXECSEAM_CLOUDFLARE_MODE`, `EXECSEAM_CLOUDFLARE_TERMINAL` ([`CloudflareConfig::terminal`]),
    /// `EXECSEAM_CLOUDFLARE_SNAPSHOT_DIR` ([`CloudflareConfig::snapshot_dir`]).
    /// A missing or malformed one is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<CloudflareConfig, Error> {
        let mut c = CloudflareConfig::new(vars.required(ENV_WORKER_URL, "")?);
        if let Some(key) = vars.text(ENV_API_KEY) {
            c = c.api_key(key);
        }
        if let Some(sid) = vars.text(ENV_SESSION_ID) {
            c = c.session_id(sid);
        }
        if let Some(mode) = vars.text(ENV_MODE) {
            c = c.mode(mode.parse()?);
        }
        if let Some(mode) = TerminalMode::from_vars(vars, "EXECSEAM_CLOUDFLARE_TERMINAL")? {
            c.terminal = mode;
        }
        if let Some(dir) = vars.text(ENV_SNAPSHOT_DIR) {
            c = c.snapshot_dir(dir);
        }
        c.validate()?;
        Ok(c)
    }

    /// The bridge's `apiRoutePrefix` (default `/v1`).
    #[must_use]
    pub fn api_prefix(mut self, prefix: impl Into<String>) -> Self {
        let p = prefix.into();
        self.api_prefix = format!("/{}", p.trim_matches('/'));
        self
    }

    execseam_adapter_kit::setters! {
        /// The bridge's `SANDBOX_API_KEY`, sent as `Authorization: Bearer`.
        api_key: some into SecretString,
        /// Run every command in this bridge session (`Session-Id` header). Without it commands run
        /// sessionless, which is what a stateless `Exec` wants.
        session_id: some into String,
        /// Where terminals run (default [`TerminalMode::Recorder`]: `script(1)` in the container,
        /// whose image is Ubuntu's, so any handle or process reattaches from an offset and types
        /// into it); [`TerminalMode::Attached`] for the bridge's terminal WebSocket, held by the
        /// handle that opened it (the container replays its last 256 KiB without offsets),
        /// [`TerminalMode::Auto`] for the recorder where the image has `script`, the WebSocket
        /// elsewhere.
        terminal: TerminalMode,
        /// Where snapshots are kept. The bridge keeps none: its `persist` answers a tar of
        /// `/workspace` and `hydrate` takes one back (the OpenAI Agents SDK's Cloudflare client
        /// keeps that tar as its snapshot too), so the adapter keeps each tar as a file here.
        /// Default: `$XDG_STATE_HOME/execseam/cloudflare-snapshots`, else
        /// `$HOME/.local/state/execseam/cloudflare-snapshots`; with neither set, a snapshot is
        /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig) until this is set.
        snapshot_dir: some into PathBuf,
    }

    /// The snapshot directory: [`snapshot_dir`](Self::snapshot_dir)'s, else the default.
    pub(crate) fn snapshots_in(&self) -> Option<PathBuf> {
        let state = || {
            std::env::var_os("XDG_STATE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .filter(|v| !v.is_empty())
                        .map(|h| PathBuf::from(h).join(".local/state"))
                })
        };
        self.snapshot_dir
            .clone()
            .or_else(|| state().map(|s| s.join("execseam").join("cloudflare-snapshots")))
    }

    execseam_adapter_kit::setters! {
        /// How output is obtained; see [`OutputMode`].
        mode: OutputMode,
        /// The bridge's `timeout_ms`: the sandbox kills a command that runs longer (sessionless:
        /// exit 124 plus a line on stderr, which the adapter reports as `Timeout(Command)`). Unset by
        /// default: deadlines belong to the host (`execseam_core::layer`), but since the bridge
        /// cannot kill an abandoned command, this bounds how long one keeps running.
        command_timeout: some Duration,
        /// TCP/TLS connect timeout (default 10 s).
        connect_timeout: Duration,
        /// The longest wait for the exec answer's head and then for each of its events (default
        /// 10 min): the bridge sends no keepalives, so a command silent for longer fails with
        /// `Timeout(Request)` (`Retry::Unsafe`). Raise it for commands that are quiet for longer.
        stream_idle_timeout: Duration,
        /// The timeout of each request that is not the exec stream (default 120 s).
        request_timeout: Duration,
        /// Check before every command that the sandbox's container is still the one this adapter
        /// connected to (default true). The bridge silently gives a sandbox id whose container was
        /// destroyed or replaced a fresh, empty container; with this check such a command fails
        /// with `NotFound` instead of running against a blank `/workspace`.
        verify_sandbox: bool,
        /// How many times connecting retries a bridge answer that is safe to retry
        /// (`capacity_exceeded`, `pool_error`, 429), with exponential backoff (default 4).
        connect_attempts: u32 => .max(1),
        /// The most of any one answer read (default [`DEFAULT_MAX_ANSWER_BYTES`]): a JSON answer,
        /// a file read back (the buffered mode's output files), and each line of the exec event
        /// stream (an event, its data lines together, at most twice this). A larger (or endless)
        /// answer fails with `OutputLimit` (a JSON answer or file) or `Protocol` (an event stream
        /// line), `Retry::Never` before the command is submitted and `Unsafe` after, instead of
        /// being collected whole.
        max_answer_bytes: usize => .max(1024),
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The output mode.
    pub fn output_mode(&self) -> OutputMode {
        self.mode
    }

    pub(crate) fn bearer(&self) -> Option<&str> {
        self.api_key.as_ref().map(|k| k.expose_secret())
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(vars::config_error(
                crate::PROVIDER,
                format!(
                    "the bridge URL {:?} must start with http:// or https://",
                    self.base_url
                ),
            ));
        }
        if let Some(sid) = &self.session_id
            && !valid_session_id(sid)
        {
            return Err(vars::config_error(
                crate::PROVIDER,
                format!(
                    "session id {sid:?} is not what the bridge accepts ([a-zA-Z0-9._-]{{1,128}}, no `..`)"
                ),
            ));
        }
        Ok(())
    }
}

/// The bridge's sandbox id rule: `^[a-z2-7]{1,128}$`.
pub fn valid_sandbox_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
}

/// The bridge's session id rule: `^[a-zA-Z0-9._-]{1,128}$` and no `..`.
pub fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !id.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_key() {
        let c = CloudflareConfig::new("https://b.example/").api_key("sekrit-token");
        let d = format!("{c:?}");
        assert!(!d.contains("sekrit-token"), "{d}");
        assert!(d.contains("REDACTED"), "{d}");
        assert_eq!(c.base_url(), "https://b.example");
    }

    #[test]
    fn ids_follow_the_bridge_rules() {
        assert!(valid_sandbox_id("mfrggzdfmy2tqnrzgezdgnbv"));
        assert!(!valid_sandbox_id("Upper"));
        assert!(!valid_sandbox_id("a1"));
        assert!(!valid_sandbox_id(""));
        assert!(valid_session_id("s-1.x_y"));
        assert!(!valid_session_id("a..b"));
        assert!(!valid_session_id("a b"));
        let bad = CloudflareConfig::new("https://x").session_id("a b");
        assert_eq!(bad.validate().unwrap_err().kind(), ErrorKind::InvalidConfig);
        let bad = CloudflareConfig::new("ftp://x");
        assert!(bad.validate().is_err());
    }

    #[test]
    fn modes_parse() {
        assert_eq!("exact".parse::<OutputMode>().unwrap(), OutputMode::Exact);
        assert_eq!("".parse::<OutputMode>().unwrap(), OutputMode::Streaming);
        assert!("binary".parse::<OutputMode>().is_err());
    }
}
