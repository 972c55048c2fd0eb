//! Configuration of the Chrono adapter and of the durable client.

use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use secrecy::SecretString;

use crate::PROVIDER;
use crate::wire::{DEFAULT_TIMEOUT_SECS, MAX_RESPONSE_BYTES, check_timeout};

/// The timing rules of the durable client (seed 004, "Durable workflow execution").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurablePolicy {
    /// Upper bound of each HTTP exchange (submit, status, result, cancel). Aevatar: 15 s.
    pub exchange_timeout: Duration,
    /// `Retry-After` is honoured up to this. Aevatar: 30 s.
    pub retry_after_cap: Duration,
    /// The delay when an answer has no `Retry-After`. Aevatar: 2 s.
    pub default_retry_after: Duration,
    /// Consecutive transient failures (429, retryable 503, 5xx, transport) before the loop
    /// gives up with the last error.
    pub max_transient_failures: u32,
}

impl Default for DurablePolicy {
    fn default() -> Self {
        DurablePolicy {
            exchange_timeout: Duration::from_secs(15),
            retry_after_cap: Duration::from_secs(30),
            default_retry_after: Duration::from_secs(2),
            max_transient_failures: 30,
        }
    }
}

impl DurablePolicy {
    /// The delay to wait for an answer's `Retry-After`: the default when absent, capped.
    pub fn delay(&self, retry_after: Option<Duration>) -> Duration {
        retry_after
            .unwrap_or(self.default_retry_after)
            .min(self.retry_after_cap)
    }
}

/// Where and how the adapter reaches Chrono.
///
/// `Debug` never shows the tokens.
#[derive(Clone, Debug)]
pub struct ChronoConfig {
    pub(crate) base_url: String,
    pub(crate) via: Option<String>,
    pub(crate) token: Option<SecretString>,
    pub(crate) delegation_token: Option<SecretString>,
    pub(crate) timeout_secs: u32,
    pub(crate) request_slack: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_stdin: u64,
    pub(crate) max_response_bytes: usize,
    pub(crate) durable: bool,
    pub(crate) policy: DurablePolicy,
    pub(crate) state_dir: Option<std::path::PathBuf>,
}

impl ChronoConfig {
    /// A configuration for the service rooted at `base_url`: Chrono itself (`http://host:port`),
    /// or a NyxID proxy route (`https://nyx.example/api/v1/proxy/s/chrono-sandbox`, with
    /// [`via`](Self::via) naming the exact UserService).
    pub fn new(base_url: impl Into<String>) -> ChronoConfig {
        ChronoConfig {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            via: None,
            token: None,
            delegation_token: None,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            request_slack: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_stdin: 8 << 20,
            max_response_bytes: MAX_RESPONSE_BYTES * 64,
            durable: false,
            policy: DurablePolicy::default(),
            state_dir: None,
        }
    }

    /// Reads the configuration from the environment ([`VARS`](crate::VARS)); see
    /// the variables in [`VARS`](crate::VARS).
    pub fn from_env() -> Result<ChronoConfig, Error> {
        crate::Chrono::config_from(&vars::env)
    }

    /// Reads the configuration from `vars` (empty values count as unset):
    ///
    /// - `CHRONO_BASE_URL` (required): the service root;
    /// - `CHRONO_TOKEN`: sent as `Authorization: Bearer …`;
    /// - `CHRONO_DELEGATION_TOKEN`: sent as `X-NyxID-Delegation-Token`;
    /// - `CHRONO_VIA`: the NyxID UserService id, sent as `_nyxid_via`;
    /// - `CHRONO_TIMEOUT_SECS`: 1..=600, default 180;
    /// - `CHRONO_DURABLE`: `1`/`true` runs commands through `/executions`;
    /// - `CHRONO_STATE_DIR`: where process handles are recorded ([`state_dir`](Self::state_dir)).
    ///
    /// Anything missing or unparsable is `InvalidConfig`, before any I/O.
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<ChronoConfig, Error> {
        let mut c = ChronoConfig::new(vars.required("CHRONO_BASE_URL", "")?);
        if let Some(t) = vars.text("CHRONO_TOKEN") {
            c = c.token(t);
        }
        if let Some(t) = vars.text("CHRONO_DELEGATION_TOKEN") {
            c = c.delegation_token(t);
        }
        if let Some(v) = vars.text("CHRONO_VIA") {
            c = c.via(v);
        }
        if let Some(secs) = vars.number("CHRONO_TIMEOUT_SECS", "a number of seconds")? {
            c = c.timeout_secs(secs);
        }
        if let Some(d) = vars.flag("CHRONO_DURABLE")? {
            c = c.durable(d);
        }
        if let Some(d) = vars.text("CHRONO_STATE_DIR") {
            c = c.state_dir(d);
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks the configuration (once: `ChronoExec::new`, `HttpTransport::new`).
    pub fn validate(&self) -> Result<(), Error> {
        check_timeout(self.timeout_secs).map_err(|m| {
            vars::config_error(PROVIDER, format!("ChronoConfig::timeout_secs: {m}"))
        })?;
        // Parsed whole here, so no request can fail on the URL later.
        vars::parse_url(PROVIDER, "the base URL", &self.base_url, &["http", "https"])?;
        if self.policy.exchange_timeout.is_zero() {
            return Err(vars::config_error(
                PROVIDER,
                "DurablePolicy::exchange_timeout is zero".to_owned(),
            ));
        }
        Ok(())
    }

    /// The service root.
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    execseam_adapter_kit::setters! {
        /// The NyxID UserService id (`?_nyxid_via=`), when going through the NyxID proxy.
        via: some into String,
    }

    /// The bearer credential (a NyxID bearer or Agent Key `nyxid_ag_…`); kept in a
    /// `SecretString`, never shown.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(SecretString::from(token.into()));
        self
    }

    /// The short-lived `X-NyxID-Delegation-Token` (scope `sandbox:execute`), when calling past
    /// NyxID.
    #[must_use]
    pub fn delegation_token(mut self, token: impl Into<String>) -> Self {
        self.delegation_token = Some(SecretString::from(token.into()));
        self
    }

    execseam_adapter_kit::setters! {
        /// `timeout_secs` sent with every execution: 1..=600, default 180. An invalid value is
        /// `InvalidConfig`, before any I/O.
        timeout_secs: u32,
        /// How much longer than `timeout_secs` the synchronous HTTP request may take (default 30
        /// s), so the server's deadline fires first.
        request_slack: Duration,
        /// TCP connect timeout (default 10 s).
        connect_timeout: Duration,
        /// The largest stdin accepted (default 8 MiB); larger is `InvalidCommand` before any I/O.
        max_stdin: u64,
        /// The largest response body read (default 64 MiB; Aevatar uses 1 MiB); a larger one is
        /// `OutputLimit`.
        max_response_bytes: usize,
        /// Run commands through the durable `/executions` contract instead of `/execute`.
        durable: bool,
        /// The durable client's timing rules.
        policy: DurablePolicy,
    }

    /// Where process handles record their operations (one small file per handle, under a
    /// directory per service root): any `execseam` process on this host with the same
    /// configuration finds a handle's command from there. Default `$XDG_STATE_HOME/execseam/chrono`,
    /// else `$HOME/.local/state/execseam/chrono`.
    #[must_use]
    pub fn state_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// The configured `timeout_secs`.
    pub fn configured_timeout_secs(&self) -> u32 {
        self.timeout_secs
    }

    /// Whether commands go through `/executions`.
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// The durable client's timing rules.
    pub fn durable_policy(&self) -> DurablePolicy {
        self.policy
    }
}
