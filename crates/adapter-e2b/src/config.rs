//! Configuration: where the control plane and the sandboxes are, credentials, timeouts.
//!
//! Base URLs are resolved the way the official SDK resolves them
//! (`e2b/connection_config.py`):
//!
//! - the control plane is [`E2bConfig::api_url`] (`E2B_API_URL`), else `https://api.<domain>`;
//! - envd is [`E2bConfig::sandbox_url`] (`E2B_SANDBOX_URL`) for every sandbox when set, else
//!   `https://sandbox.<domain>` for E2B's own domains (the sandbox is chosen by the
//!   `E2b-Sandbox-Id`/`E2b-Sandbox-Port` headers, which are always sent), else the classic
//!   `https://49983-<sandboxID>.<domain>`; `<domain>` is the one the control plane returned for
//!   the sandbox, else [`E2bConfig::domain`] (`E2B_DOMAIN`, default `e2b.app`).

use std::collections::BTreeMap;
use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::secret_env::SecretEnv;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use reqwest::Url;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The domains on which the SDK uses the shared `sandbox.<domain>` host
/// (`e2b/sandbox_domains.py`).
pub const SHARED_HOST_DOMAINS: &[&str] = &[
    "e2b.app",
    "e2b.dev",
    "e2b.pro",
    "e2b-staging.dev",
    "e2b-tango.dev",
    "e2b-juliett.dev",
    "foxtrot-2.e2b.dev",
];

/// envd's port (`ConnectionConfig.envd_port`).
pub const ENVD_PORT: u16 = 49983;

/// Which control-plane routes to use for create and connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ApiRoutes {
    /// `POST /v2/sandboxes`, `POST /v2/sandboxes/{id}/connect` (Python SDK 2.5x+).
    #[default]
    V2,
    /// `POST /sandboxes` (with `"secure": true`), `POST /sandboxes/{id}/connect` (older SDKs,
    /// the JS SDK, self-hosted control planes without the v2 routes).
    Legacy,
}

/// Configuration of [`E2bProvider`](crate::E2bProvider): credentials, endpoints, defaults for
/// new sandboxes, timeouts. Built with [`E2bConfig::new`] and the setters, or
/// [`E2bConfig::from_env`]; checked (URLs) by [`E2bProvider::new`](crate::E2bProvider::new).
/// `Debug` never prints the API key or env values.
#[derive(Clone, Debug)]
pub struct E2bConfig {
    pub(crate) api_key: SecretString,
    pub(crate) domain: String,
    pub(crate) api_url: Option<String>,
    pub(crate) sandbox_url: Option<String>,
    pub(crate) template: String,
    pub(crate) sandbox_timeout: Duration,
    pub(crate) sandbox_env: SecretEnv,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) stream_idle_timeout: Duration,
    pub(crate) command_timeout: Option<Duration>,
    pub(crate) keepalive_interval: Duration,
    pub(crate) user: Option<String>,
    pub(crate) api_routes: ApiRoutes,
    pub(crate) kill_on_drop: bool,
    pub(crate) native_tools: bool,
}

fn parse_url(what: &str, s: &str) -> Result<Url, Error> {
    vars::parse_url(PROVIDER, what, s, &["http", "https"])
}

impl E2bConfig {
    /// A configuration with this API key and every default.
    pub fn new(api_key: impl Into<String>) -> E2bConfig {
        E2bConfig {
            api_key: SecretString::from(api_key.into()),
            domain: "e2b.app".into(),
            api_url: None,
            sandbox_url: None,
            template: "base".into(),
            sandbox_timeout: Duration::from_secs(300),
            sandbox_env: SecretEnv::default(),
            metadata: BTreeMap::new(),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            stream_idle_timeout: Duration::from_secs(150),
            command_timeout: None,
            keepalive_interval: Duration::from_secs(50),
            user: None,
            api_routes: ApiRoutes::V2,
            kill_on_drop: true,
            native_tools: true,
        }
    }

    /// Reads the environment the SDK reads (see [`VARS`](crate::VARS)).
    pub fn from_env() -> Result<E2bConfig, Error> {
        crate::E2b::config_from(&vars::env)
    }

    /// Reads the variables in [`VARS`](crate::VARS) as `vars` gives them (an unset or empty one keeps
    /// the default): `E2B_API_KEY` (required), `E2B_DOMAIN`, `E2B_API_URL`, `E2B_SANDBOX_URL`;
    /// plus `E2B_TEMPLATE`, `E2B_SANDBOX_TIMEOUT` (seconds), `E2B_COMMAND_TIMEOUT` (seconds),
    /// `E2B_USER` and `E2B_API_ROUTES` (`v2`|`legacy`). A missing key or a bad value is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<E2bConfig, Error> {
        let mut c = E2bConfig::new(vars.required("E2B_API_KEY", "")?);
        if let Some(d) = vars.text("E2B_DOMAIN") {
            c.domain = d;
        }
        if let Some(u) = vars.text("E2B_API_URL") {
            parse_url("E2B_API_URL", &u)?;
            c.api_url = Some(u);
        }
        if let Some(u) = vars.text("E2B_SANDBOX_URL") {
            parse_url("E2B_SANDBOX_URL", &u)?;
            c.sandbox_url = Some(u);
        }
        if let Some(t) = vars.text("E2B_TEMPLATE") {
            c.template = t;
        }
        if let Some(t) = vars.seconds("E2B_SANDBOX_TIMEOUT")? {
            c.sandbox_timeout = t;
        }
        c.command_timeout = vars.seconds("E2B_COMMAND_TIMEOUT")?;
        c.user = vars.text("E2B_USER");
        let routes = [("v2", ApiRoutes::V2), ("legacy", ApiRoutes::Legacy)];
        if let Some(r) = vars.choice("E2B_API_ROUTES", &routes)? {
            c.api_routes = r;
        }
        Ok(c)
    }

    execseam_adapter_kit::setters! {
        /// The domain (`E2B_DOMAIN`, default `e2b.app`).
        domain: into String,
        /// The control plane (`E2B_API_URL`); unset means `https://api.<domain>`.
        api_url: some into String,
        /// envd for every sandbox (`E2B_SANDBOX_URL`); unset derives it from the domain.
        sandbox_url: some into String,
        /// The template new sandboxes start from unless the spec names one (`E2B_TEMPLATE`,
        /// default `base`).
        template: into String,
        /// The lifetime asked for on create (unless the spec sets one) and on connect
        /// (`E2B_SANDBOX_TIMEOUT` seconds, default 300).
        sandbox_timeout: Duration,
    }

    execseam_adapter_kit::entry_setters! {
        /// A sandbox-wide environment variable set on every create (`envVars`), under the spec's.
        sandbox_env => sandbox_env,
        /// A metadata entry set on every create, under the spec's labels.
        metadata => metadata,
    }

    execseam_adapter_kit::setters! {
        /// Bound on each unary call and control-plane request (default 60 s, the SDK's).
        request_timeout: Duration,
        /// Bound on establishing a connection (default 10 s).
        connect_timeout: Duration,
        /// A stream with no byte (not even a keepalive) for this long is dead (default 150 s).
        stream_idle_timeout: Duration,
        /// Sent as `Connect-Timeout-Ms` on `process.Start`: envd kills the command at this deadline
        /// and the exec fails with `Timeout(Command)`. `None` (the default) sends none: commands run
        /// until they exit or the host's deadline drops them (which kills them with `SendSignal`).
        command_timeout: Option<Duration>,
        /// `Keepalive-Ping-Interval` asked of envd on streams (default 50 s, the SDK's).
        keepalive_interval: Duration,
        /// Run as this user (`Authorization: Basic base64("<user>:")`); unset is envd's default
        /// user (`user` on E2B templates).
        user: some into String,
        /// Which create/connect routes to use.
        api_routes: ApiRoutes,
        /// Kill an owned sandbox that was never closed when its last handle is dropped (the safety
        /// net; default true).
        kill_on_drop: bool,
        /// Serve the tools' `list` and `glob` from `ListDir` when provably exact (default true).
        native_tools: bool,
    }

    /// Checks every setting that can be wrong before any I/O.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        self.api_base()?;
        self.envd_base("sbx", None)?;
        if self.api_key.expose_secret().is_empty() {
            return Err(vars::config_error(PROVIDER, "the API key is empty"));
        }
        Ok(())
    }

    /// The control plane's base URL.
    pub(crate) fn api_base(&self) -> Result<Url, Error> {
        match &self.api_url {
            Some(u) => parse_url("the API URL", u),
            None => parse_url("the API URL", &format!("https://api.{}", self.domain)),
        }
    }

    /// envd's base URL for a sandbox, given the domain the control plane returned for it.
    pub(crate) fn envd_base(
        &self,
        sandbox_id: &str,
        sandbox_domain: Option<&str>,
    ) -> Result<Url, Error> {
        if let Some(u) = &self.sandbox_url {
            return parse_url("the sandbox URL", u);
        }
        let domain = sandbox_domain
            .filter(|d| !d.is_empty())
            .unwrap_or(&self.domain);
        if SHARED_HOST_DOMAINS.contains(&domain) {
            parse_url("the sandbox URL", &format!("https://sandbox.{domain}"))
        } else {
            parse_url(
                "the sandbox URL",
                &format!("https://{ENVD_PORT}-{sandbox_id}.{domain}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_resolve_like_the_sdk() {
        let mut c = E2bConfig::new("k");
        assert_eq!(c.api_base().unwrap().as_str(), "https://api.e2b.app/");
        assert_eq!(
            c.envd_base("sbx1", None).unwrap().as_str(),
            "https://sandbox.e2b.app/"
        );
        assert_eq!(
            c.envd_base("sbx1", Some("e2b.dev")).unwrap().as_str(),
            "https://sandbox.e2b.dev/"
        );
        assert_eq!(
            c.envd_base("sbx1", Some("example.com")).unwrap().as_str(),
            "https://49983-sbx1.example.com/"
        );
        c = c.domain("self.hosted");
        assert_eq!(c.api_base().unwrap().as_str(), "https://api.self.hosted/");
        assert_eq!(
            c.envd_base("sbx1", None).unwrap().as_str(),
            "https://49983-sbx1.self.hosted/"
        );
        c = c.sandbox_url("http://127.0.0.1:9/");
        assert_eq!(
            c.envd_base("sbx1", Some("e2b.app")).unwrap().as_str(),
            "http://127.0.0.1:9/"
        );
    }

    #[test]
    fn debug_redacts_the_key_and_env_values() {
        let c = E2bConfig::new("e2b_supersecret").sandbox_env("TOKEN", "hunter2");
        let d = format!("{c:?}");
        assert!(!d.contains("supersecret"), "{d}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("TOKEN"), "{d}");
    }
}
