//! Configuration of the Sprites adapter.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::attached::TerminalMode;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The public Sprites API.
pub const DEFAULT_BASE_URL: &str = "https://api.sprites.dev";

/// How commands are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `GET /v1/sprites/{name}/exec` upgraded to a WebSocket: streaming, exact bytes, kill.
    WebSocket,
    /// `POST /v1/sprites/{name}/exec`: one HTTP request, for networks where WebSockets are not
    /// wanted. Its frames carry no length, so output is attributed per HTTP chunk: no streaming,
    /// no kill, and output bytes are not guaranteed exact (`binary_output = false`).
    Http,
}

/// What a command with [`Command::env`](execseam_core::Command::env) is sent with.
///
/// The API reference says the `env` parameters *replace* the sprite's default environment; the
/// 2025 server code *merges* them over the image's environment. `Command::env` means "added to
/// the base environment", so the adapter must not depend on which is true.
#[derive(Clone, PartialEq, Eq)]
pub enum BaseEnv {
    /// Read the sprite's environment once (`env -0` with no `env` parameters) and send it with
    /// every command that sets variables: correct under both semantics (the default).
    Discover,
    /// Send only `Command::env`, trusting the server to merge.
    Server,
    /// Send this environment under `Command::env`.
    Fixed(BTreeMap<String, String>),
}

impl fmt::Debug for BaseEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BaseEnv::Discover => f.write_str("Discover"),
            BaseEnv::Server => f.write_str("Server"),
            BaseEnv::Fixed(m) => f
                .debug_tuple("Fixed")
                .field(&m.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// Where the adapter runs commands, and how. `Debug` never shows the token.
#[derive(Clone, Debug)]
pub struct SpritesConfig {
    pub(crate) base_url: String,
    pub(crate) token: SecretString,
    pub(crate) transport: Transport,
    pub(crate) base_env: BaseEnv,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) http_idle_timeout: Duration,
    pub(crate) ping_interval: Duration,
    pub(crate) pong_timeout: Duration,
    pub(crate) ws_buffers: WsBuffers,
    pub(crate) terminal: TerminalMode,
}

/// The client-side buffers of one exec WebSocket: what each command in flight holds while it
/// runs, besides its output. Frames the server sends are still read whole, up to the 64 MiB
/// frame limit (tokio-websockets' read buffer starts at 8 KiB and grows for a large frame;
/// it is freed with the exec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WsBuffers {
    /// Outgoing messages (stdin chunks of [`stdin_chunk`](Self::stdin_chunk) bytes, control
    /// frames) queued for the writer, besides the one being written.
    pub outgoing: usize,
    /// The size of one stdin message (default 16 KiB; at most three are held at once: one being
    /// written, one queued, one being made).
    pub stdin_chunk: usize,
}

impl WsBuffers {
    /// The default: one queued outgoing message; 16 KiB stdin messages.
    pub const DEFAULT: WsBuffers = WsBuffers {
        outgoing: 1,
        stdin_chunk: 16 << 10,
    };
    /// What the adapter used before the buffers were bounded (eight queued 64 KiB messages);
    /// kept for the memory benchmark.
    pub const LEGACY: WsBuffers = WsBuffers {
        outgoing: 8,
        stdin_chunk: 64 << 10,
    };
}

impl Default for WsBuffers {
    fn default() -> WsBuffers {
        WsBuffers::DEFAULT
    }
}

impl SpritesConfig {
    /// A configuration against the public API, over WebSockets.
    pub fn new(token: impl Into<String>) -> SpritesConfig {
        SpritesConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            token: SecretString::from(token.into()),
            transport: Transport::WebSocket,
            base_env: BaseEnv::Discover,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            http_idle_timeout: Duration::from_secs(600),
            ping_interval: Duration::from_secs(15),
            pong_timeout: Duration::from_secs(45),
            ws_buffers: WsBuffers::DEFAULT,
            terminal: TerminalMode::Recorder,
        }
    }

    /// Reads the variables in [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<SpritesConfig, Error> {
        crate::Sprites::config_from(&vars::env)
    }

    /// Reads the configuration as `vars` gives it (unset or empty keeps the default):
    ///
    /// - `SPRITE_TOKEN` (required; the Sprites CLI's name): the API token;
    /// - `SPRITES_API_URL` (optional, the CLI's name): the API base URL;
    /// - `SPRITES_EXEC_TRANSPORT` (optional): `websocket` (default) or `http`;
    /// - `EXECSEAM_SPRITES_TERMINAL` (optional): `recorder` (default), `auto` or `attached`
    ///   ([`SpritesConfig::terminal`]).
    ///
    /// A missing or malformed setting is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<SpritesConfig, Error> {
        let mut c = SpritesConfig::new(vars.required("SPRITE_TOKEN", "")?);
        if let Some(url) = vars.text("SPRITES_API_URL") {
            c = c.base_url(url);
        }
        let transports = [
            ("websocket", Transport::WebSocket),
            ("ws", Transport::WebSocket),
            ("http", Transport::Http),
            ("post", Transport::Http),
        ];
        if let Some(t) = vars.choice("SPRITES_EXEC_TRANSPORT", &transports)? {
            c = c.transport(t);
        }
        if let Some(mode) = TerminalMode::from_vars(vars, "EXECSEAM_SPRITES_TERMINAL")? {
            c.terminal = mode;
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks what can be wrong before any I/O.
    /// The API URL, parsed (once, by the client).
    pub(crate) fn parsed_base_url(&self) -> Result<reqwest::Url, Error> {
        vars::parse_url(PROVIDER, "the API URL", &self.base_url, &["http", "https"])
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        self.parsed_base_url()?;
        if self.token.expose_secret().is_empty() {
            return Err(vars::config_error(PROVIDER, "the token is empty"));
        }
        if self.transport == Transport::Http && self.terminal != TerminalMode::Recorder {
            return Err(vars::config_error(
                PROVIDER,
                "the HTTP transport has no TTY exec (the server refuses `tty` there): its terminals are the recorder's",
            ));
        }
        Ok(())
    }

    /// The API base URL (default [`DEFAULT_BASE_URL`]; an emulator's URL in tests).
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    execseam_adapter_kit::setters! {
        /// The exec transport (default [`Transport::WebSocket`]).
        transport: Transport,
        /// Where terminals run (default [`TerminalMode::Recorder`]: `script(1)` in the sprite, a full
        /// Linux VM, so any handle or process reattaches from an offset and types into it);
        /// [`TerminalMode::Attached`] for Sprites' own TTY exec, held by the handle that opened it
        /// (its reattach replays a bounded scrollback without offsets), [`TerminalMode::Auto`] for
        /// the recorder where the sprite has `script` and the TTY exec elsewhere. The HTTP transport
        /// has only the recorder.
        terminal: TerminalMode,
        /// What commands with env are sent with (default [`BaseEnv::Discover`]).
        base_env: BaseEnv,
        /// The TCP/TLS connect timeout (default 10 s).
        connect_timeout: Duration,
        /// The timeout of the WebSocket handshake and of the small HTTP calls (kill, probe;
        /// default 30 s). The command itself has no deadline here: use the host's deadline layer.
        request_timeout: Duration,
        /// How long any HTTP answer may stay silent (no byte: the response headers, or the next
        /// chunk of a body) before it is `Err(Timeout(Request))`, `Retry::Unsafe` after the exec was
        /// sent (default 10 min). The HTTP exec transport has no keepalive, so a command silent for
        /// longer ends the same way: use the WebSocket transport (pings every `keepalive`
        /// interval) for those.
        http_idle_timeout: Duration,
    }

    /// How often a ping is sent on an exec WebSocket (default 15 s, as the SDKs), and how long
    /// without any frame before the connection is declared lost (default 45 s).
    #[must_use]
    pub fn keepalive(mut self, ping_interval: Duration, pong_timeout: Duration) -> Self {
        self.ping_interval = ping_interval;
        self.pong_timeout = pong_timeout;
        self
    }

    execseam_adapter_kit::setters! {
        /// The exec WebSocket's client-side buffers (default [`WsBuffers::DEFAULT`]).
        ws_buffers: WsBuffers,
    }

    pub(crate) fn authorization(&self) -> String {
        format!("Bearer {}", self.token.expose_secret())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_transport_has_only_the_recorders_terminals() {
        let http = SpritesConfig::new("t").transport(Transport::Http);
        assert!(http.clone().validate().is_ok());
        for mode in [TerminalMode::Auto, TerminalMode::Attached] {
            let e = http.clone().terminal(mode).validate().unwrap_err();
            assert_eq!(e.kind(), execseam_core::ErrorKind::InvalidConfig, "{e}");
        }
    }

    #[test]
    fn debug_redacts_the_token_and_env_values() {
        let c = SpritesConfig::new("spr_secret_token").base_env(BaseEnv::Fixed(
            [("K".to_string(), "hidden-value".to_string())].into(),
        ));
        let d = format!("{c:?}");
        assert!(!d.contains("spr_secret_token"), "{d}");
        assert!(!d.contains("hidden-value"), "{d}");
        assert!(d.contains("\"K\""), "{d}");
    }
}
