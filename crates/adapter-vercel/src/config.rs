//! Configuration: credentials (an access token with its team and project, or an OIDC token),
//! the API base, defaults for new sandboxes, timeouts.
//!
//! Credentials are resolved as the SDKs resolve them (`utils/get-credentials.ts`): an explicit
//! `{token, teamId, projectId}` (all three, or none of them), else a Vercel OIDC token
//! (`VERCEL_OIDC_TOKEN`, a JWT whose claims `owner_id` and `project_id` give the team and the
//! project). The token is kept in a `secrecy` string and never printed.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::secret_env::SecretEnv;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The SDKs' default API base (`https://vercel.com/api`).
pub const DEFAULT_API_URL: &str = "https://vercel.com/api";

/// Configuration of [`VercelProvider`](crate::VercelProvider). Built with [`VercelConfig::new`]
/// (or [`VercelConfig::from_oidc_token`]) and the setters, or [`VercelConfig::from_env`];
/// checked by [`VercelProvider::new`](crate::VercelProvider::new). `Debug` never prints the
/// token or env values.
#[derive(Clone, Debug)]
pub struct VercelConfig {
    pub(crate) token: SecretString,
    pub(crate) team_id: String,
    pub(crate) project_id: String,
    pub(crate) api_url: String,
    pub(crate) runtime: Option<String>,
    pub(crate) sandbox_timeout: Option<Duration>,
    pub(crate) vcpus: Option<u32>,
    pub(crate) ports: Vec<u16>,
    pub(crate) sandbox_env: SecretEnv,
    pub(crate) tags: BTreeMap<String, String>,
    pub(crate) command_timeout: Option<Duration>,
    pub(crate) sudo: bool,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) stream_idle_timeout: Duration,
}

/// The default [`VercelConfig::stream_idle_timeout`].
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The team and project claims of a Vercel OIDC token (`owner_id`, `project_id`).
fn oidc_claims(token: &str) -> Result<(String, String), Error> {
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| vars::config_error(PROVIDER, "the OIDC token is not a JWT"))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| vars::config_error(PROVIDER, "the OIDC token's payload is not base64url"))?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|_| vars::config_error(PROVIDER, "the OIDC token's payload is not JSON"))?;
    let claim = |k: &str| {
        claims[k]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| vars::config_error(PROVIDER, format!("the OIDC token has no {k} claim")))
    };
    Ok((claim("owner_id")?, claim("project_id")?))
}

impl VercelConfig {
    /// An access token with its team and project, and every default.
    pub fn new(
        token: impl Into<String>,
        team_id: impl Into<String>,
        project_id: impl Into<String>,
    ) -> VercelConfig {
        VercelConfig {
            token: SecretString::from(token.into()),
            team_id: team_id.into(),
            project_id: project_id.into(),
            api_url: DEFAULT_API_URL.into(),
            runtime: None,
            sandbox_timeout: None,
            vcpus: None,
            ports: Vec::new(),
            sandbox_env: SecretEnv::default(),
            tags: BTreeMap::new(),
            command_timeout: None,
            sudo: false,
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
        }
    }

    /// A Vercel OIDC token: the team and the project come from its `owner_id` and `project_id`
    /// claims (the signature is the API's to check). Not a JWT, or a claim missing:
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub fn from_oidc_token(token: impl Into<String>) -> Result<VercelConfig, Error> {
        let token = token.into();
        let (team, project) = oidc_claims(&token)?;
        Ok(VercelConfig::new(token, team, project))
    }

    /// The configuration from the process environment (see [`VARS`](crate::VARS)).
    pub fn from_env() -> Result<VercelConfig, Error> {
        crate::Vercel::config_from(&vars::env)
    }

    /// Reads `VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID` (all three, or none), else
    /// `VERCEL_OIDC_TOKEN`; then `VERCEL_API_URL`, `VERCEL_SANDBOX_RUNTIME`,
    /// `VERCEL_SANDBOX_TIMEOUT` (seconds), `VERCEL_SANDBOX_VCPUS`, `VERCEL_COMMAND_TIMEOUT`
    /// (seconds) and `VERCEL_SANDBOX_SUDO` (`1`/`true`). Missing credentials or a bad value:
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<VercelConfig, Error> {
        let explicit = [
            vars.text("VERCEL_TOKEN"),
            vars.text("VERCEL_TEAM_ID"),
            vars.text("VERCEL_PROJECT_ID"),
        ];
        let mut c = match explicit {
            [Some(t), Some(team), Some(p)] => VercelConfig::new(t, team, p),
            [None, None, None] => match vars.text("VERCEL_OIDC_TOKEN") {
                Some(t) => VercelConfig::from_oidc_token(t)?,
                None => {
                    return Err(vars.error(
                        "no credentials: set VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID, or VERCEL_OIDC_TOKEN",
                    ));
                }
            },
            _ => {
                return Err(vars.error(
                    "VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID go together: set all three or none",
                ));
            }
        };
        if let Some(u) = vars.text("VERCEL_API_URL") {
            c.api_url = u;
        }
        c.runtime = vars.text("VERCEL_SANDBOX_RUNTIME");
        c.sandbox_timeout = vars.seconds("VERCEL_SANDBOX_TIMEOUT")?;
        c.vcpus = vars.number("VERCEL_SANDBOX_VCPUS", "a whole number of vCPUs")?;
        c.command_timeout = vars.seconds("VERCEL_COMMAND_TIMEOUT")?;
        if let Some(sudo) = vars.flag("VERCEL_SANDBOX_SUDO")? {
            c.sudo = sudo;
        }
        Ok(c)
    }

    execseam_adapter_kit::setters! {
        /// The API base (`VERCEL_API_URL`, default [`DEFAULT_API_URL`]); an emulator's URL offline.
        api_url: into String,
        /// The runtime of new sandboxes (`node24`, `node22`, `python3.13`; unset: the service's
        /// default).
        runtime: some into String,
        /// How long a new sandbox's session lives (unset: the service's default, 5 minutes).
        sandbox_timeout: some Duration,
        /// Virtual CPUs of new sandboxes (memory follows, 2048 MB each).
        vcpus: some u32,
    }

    /// A port new sandboxes expose.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.ports.push(port);
        self
    }

    execseam_adapter_kit::entry_setters! {
        /// An environment variable of every command in new sandboxes.
        sandbox_env => sandbox_env,
        /// A tag of new sandboxes.
        tag => tags,
    }

    execseam_adapter_kit::setters! {
        /// The service kills a command after this long (SIGKILL: exit 137); unset: no limit.
        command_timeout: Option<Duration>,
        /// Run commands as root (`sudo: true`) instead of the sandbox's user, `vercel-sandbox`.
        sudo: bool,
        /// The limit on one request that is not a command stream (default 60 s).
        request_timeout: Duration,
        /// The limit on making a connection (default 10 s).
        connect_timeout: Duration,
        /// The longest wait for a command stream's head (`POST …/cmd`, `GET …/logs`) and then for
        /// each of its NDJSON lines (default 10 min): the API sends no keepalive lines, so a
        /// command silent for longer fails with `Timeout(Request)` (`Retry::Unsafe`: it may still
        /// run). Raise it for commands that are quiet for longer.
        stream_idle_timeout: Duration,
    }

    /// The team.
    pub fn team_id(&self) -> &str {
        &self.team_id
    }

    /// The project.
    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    pub(crate) fn token(&self) -> &str {
        self.token.expose_secret()
    }

    pub(crate) fn validate(&self) -> Result<reqwest::Url, Error> {
        if self.token().is_empty() {
            return Err(vars::config_error(PROVIDER, "the token is empty"));
        }
        if self.team_id.is_empty() || self.project_id.is_empty() {
            return Err(vars::config_error(
                PROVIDER,
                "the team id and the project id are required",
            ));
        }
        let url = vars::parse_url(PROVIDER, "the API URL", &self.api_url, &["http", "https"])?;
        if self.vcpus == Some(0) {
            return Err(vars::config_error(PROVIDER, "vcpus must be at least 1"));
        }
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::ErrorKind;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn credentials_come_in_threes_or_from_an_oidc_token() {
        let c = crate::Vercel::config_from(&vars(&[
            ("VERCEL_TOKEN", "t"),
            ("VERCEL_TEAM_ID", "team"),
            ("VERCEL_PROJECT_ID", "prj"),
        ]))
        .unwrap();
        assert_eq!((c.team_id(), c.project_id()), ("team", "prj"));
        let e = crate::Vercel::config_from(&vars(&[("VERCEL_TOKEN", "t")])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let e = crate::Vercel::config_from(&vars(&[])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"owner_id":"team_o","project_id":"prj_o","exp":1}"#);
        let jwt = format!("eyJhbGciOiJSUzI1NiJ9.{payload}.sig");
        let c = crate::Vercel::config_from(&vars(&[("VERCEL_OIDC_TOKEN", &jwt)])).unwrap();
        assert_eq!((c.team_id(), c.project_id()), ("team_o", "prj_o"));
        let e = VercelConfig::from_oidc_token("not-a-jwt").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn debug_hides_the_token_and_env_values() {
        let c = VercelConfig::new("sekrit-token", "t", "p").sandbox_env("K", "sekrit-value");
        let d = format!("{c:?}");
        assert!(!d.contains("sekrit"), "{d}");
    }

    #[test]
    fn bad_values_are_invalid_config_before_any_io() {
        for (k, v) in [
            ("VERCEL_SANDBOX_TIMEOUT", "soon"),
            ("VERCEL_SANDBOX_SUDO", "maybe"),
        ] {
            let e = crate::Vercel::config_from(&vars(&[
                ("VERCEL_TOKEN", "t"),
                ("VERCEL_TEAM_ID", "team"),
                ("VERCEL_PROJECT_ID", "prj"),
                (k, v),
            ]))
            .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{k}");
        }
        let e = VercelConfig::new("t", "team", "p")
            .api_url("ftp://x")
            .validate()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }
}
