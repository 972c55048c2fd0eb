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
use std::fmt;
use std::time::Duration;

use execseam_core::{Error, ErrorKind};
use reqwest::Url;
use secrecy::SecretString;

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

/// Configuration of [`E2bExec`](crate::E2bExec). `Debug` never prints the API key or env values.
#[derive(Clone)]
pub struct E2bConfig {
    /// The API key (`X-API-KEY`).
    pub api_key: SecretString,
    /// The domain (`E2B_DOMAIN`, default `e2b.app`).
    pub domain: String,
    /// The control plane (`E2B_API_URL`); `None` means `https://api.<domain>`.
    pub api_url: Option<Url>,
    /// envd for every sandbox (`E2B_SANDBOX_URL`); `None` derives it from the domain.
    pub sandbox_url: Option<Url>,
    /// The template to create sandboxes from (`E2B_TEMPLATE`, default `base`).
    pub template: String,
    /// The sandbox lifetime asked for on create and connect (`E2B_SANDBOX_TIMEOUT` seconds,
    /// default 300).
    pub sandbox_timeout: Duration,
    /// Sandbox-wide environment variables set at create (`envVars`).
    pub sandbox_env: BTreeMap<String, String>,
    /// Metadata set at create.
    pub metadata: BTreeMap<String, String>,
    /// Bound on each unary call and control-plane request (default 60 s, the SDK's).
    pub request_timeout: Duration,
    /// Bound on establishing a connection (default 10 s).
    pub connect_timeout: Duration,
    /// A stream with no byte (not even a keepalive) for this long is dead (default 150 s).
    pub stream_idle_timeout: Duration,
    /// Sent as `Connect-Timeout-Ms` on `process.Start`: envd kills the command at this deadline
    /// and the exec fails with `Timeout(Command)`. `None` (the default) sends none: commands run
    /// until they exit or the host's deadline drops them (which kills them with `SendSignal`).
    pub command_timeout: Option<Duration>,
    /// `Keepalive-Ping-Interval` asked of envd on streams (default 50 s, the SDK's).
    pub keepalive_interval: Duration,
    /// Run as this user (`Authorization: Basic base64("<user>:")`); `None` is envd's default
    /// user (`user` on E2B templates).
    pub user: Option<String>,
    /// Which create/connect routes to use.
    pub api_routes: ApiRoutes,
    /// Kill a sandbox this adapter created when the last handle to it is dropped (default true).
    pub kill_on_drop: bool,
    /// Serve the tools' `list` and `glob` from `ListDir` when provably exact (default true).
    pub native_tools: bool,
}

impl fmt::Debug for E2bConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bConfig")
            .field("api_key", &"<redacted>")
            .field("domain", &self.domain)
            .field("api_url", &self.api_url.as_ref().map(Url::as_str))
            .field("sandbox_url", &self.sandbox_url.as_ref().map(Url::as_str))
            .field("template", &self.template)
            .field("sandbox_timeout", &self.sandbox_timeout)
            .field("sandbox_env", &self.sandbox_env.keys().collect::<Vec<_>>())
            .field("metadata", &self.metadata.keys().collect::<Vec<_>>())
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("stream_idle_timeout", &self.stream_idle_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("user", &self.user)
            .field("api_routes", &self.api_routes)
            .field("kill_on_drop", &self.kill_on_drop)
            .field("native_tools", &self.native_tools)
            .finish()
    }
}

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidCommand, message)
        .with_provider("e2b")
        .with_operation("config")
}

fn parse_url(what: &str, s: &str) -> Result<Url, Error> {
    let url = Url::parse(s).map_err(|e| config_error(format!("{what} {s:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(config_error(format!("{what} {s:?} is not http(s)")));
    }
    Ok(url)
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
            sandbox_env: BTreeMap::new(),
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

    /// Reads the environment the SDK reads: `E2B_API_KEY` (required), `E2B_DOMAIN`,
    /// `E2B_API_URL`, `E2B_SANDBOX_URL`; plus `E2B_TEMPLATE`, `E2B_SANDBOX_TIMEOUT` (seconds),
    /// `E2B_COMMAND_TIMEOUT` (seconds), `E2B_USER` and `E2B_API_ROUTES` (`v2`|`legacy`).
    pub fn from_env() -> Result<E2bConfig, Error> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let key = var("E2B_API_KEY").ok_or_else(|| config_error("E2B_API_KEY is not set"))?;
        let mut c = E2bConfig::new(key);
        if let Some(d) = var("E2B_DOMAIN") {
            c.domain = d;
        }
        if let Some(u) = var("E2B_API_URL") {
            c.api_url = Some(parse_url("E2B_API_URL", &u)?);
        }
        if let Some(u) = var("E2B_SANDBOX_URL") {
            c.sandbox_url = Some(parse_url("E2B_SANDBOX_URL", &u)?);
        }
        if let Some(t) = var("E2B_TEMPLATE") {
            c.template = t;
        }
        let secs = |k: &str, v: String| {
            v.parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| config_error(format!("{k} {v:?} is not a number of seconds")))
        };
        if let Some(v) = var("E2B_SANDBOX_TIMEOUT") {
            c.sandbox_timeout = secs("E2B_SANDBOX_TIMEOUT", v)?;
        }
        if let Some(v) = var("E2B_COMMAND_TIMEOUT") {
            c.command_timeout = Some(secs("E2B_COMMAND_TIMEOUT", v)?);
        }
        c.user = var("E2B_USER");
        if let Some(r) = var("E2B_API_ROUTES") {
            c.api_routes = match r.as_str() {
                "v2" => ApiRoutes::V2,
                "legacy" => ApiRoutes::Legacy,
                other => {
                    return Err(config_error(format!(
                        "E2B_API_ROUTES {other:?}: want v2 or legacy"
                    )));
                }
            };
        }
        Ok(c)
    }

    /// The control plane's base URL.
    pub fn api_base(&self) -> Result<Url, Error> {
        match &self.api_url {
            Some(u) => Ok(u.clone()),
            None => parse_url("the API URL", &format!("https://api.{}", self.domain)),
        }
    }

    /// envd's base URL for a sandbox, given the domain the control plane returned for it.
    pub fn envd_base(&self, sandbox_id: &str, sandbox_domain: Option<&str>) -> Result<Url, Error> {
        if let Some(u) = &self.sandbox_url {
            return Ok(u.clone());
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
        c.domain = "self.hosted".into();
        assert_eq!(c.api_base().unwrap().as_str(), "https://api.self.hosted/");
        assert_eq!(
            c.envd_base("sbx1", None).unwrap().as_str(),
            "https://49983-sbx1.self.hosted/"
        );
        c.sandbox_url = Some(Url::parse("http://127.0.0.1:9/").unwrap());
        assert_eq!(
            c.envd_base("sbx1", Some("e2b.app")).unwrap().as_str(),
            "http://127.0.0.1:9/"
        );
    }

    #[test]
    fn debug_redacts_the_key_and_env_values() {
        let mut c = E2bConfig::new("e2b_supersecret");
        c.sandbox_env.insert("TOKEN".into(), "hunter2".into());
        let d = format!("{c:?}");
        assert!(!d.contains("supersecret"), "{d}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("TOKEN"), "{d}");
    }
}
