//! Configuration: the API token, the API base (exec is the same host over `ws(s)://`), the
//! project (and team), and where and as whom commands run.

use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The SDKs' default API base.
pub const DEFAULT_API_URL: &str = "https://api.northflank.com";

/// Configuration of [`NorthflankProvider`](crate::NorthflankProvider). Built with
/// [`NorthflankConfig::new`] and the setters, or [`NorthflankConfig::from_env`]; checked by
/// [`NorthflankProvider::new`](crate::NorthflankProvider::new). `Debug` never prints the token.
#[derive(Clone, Debug)]
pub struct NorthflankConfig {
    pub(crate) token: SecretString,
    pub(crate) project_id: String,
    pub(crate) team_id: Option<String>,
    pub(crate) api_url: String,
    pub(crate) instance_name: Option<String>,
    pub(crate) container_name: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) stdin_chunk: usize,
    pub(crate) idle_timeout: Duration,
}

/// The default [`NorthflankConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

impl NorthflankConfig {
    /// An API token and the project whose services and jobs commands run in.
    pub fn new(token: impl Into<String>, project_id: impl Into<String>) -> NorthflankConfig {
        NorthflankConfig {
            token: SecretString::from(token.into()),
            project_id: project_id.into(),
            team_id: None,
            api_url: DEFAULT_API_URL.into(),
            instance_name: None,
            container_name: None,
            user: None,
            group: None,
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            stdin_chunk: 64 * 1024,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// the variables in [`VARS`](crate::VARS) over the process environment.
    pub fn from_env() -> Result<NorthflankConfig, Error> {
        crate::Northflank::config_from(&vars::env)
    }

    /// Reads the Python SDK's variables, `NORTHFLANK_API_TOKEN` (or `NF_API_TOKEN`) and
    /// `NORTHFLANK_API_BASE_URL` (or `NF_API_HOST`, `NF_HOST`), and `NORTHFLANK_PROJECT_ID`
    /// (required), `NORTHFLANK_TEAM_ID`, `NORTHFLANK_INSTANCE`, `NORTHFLANK_CONTAINER`,
    /// `NORTHFLANK_USER`, `NORTHFLANK_GROUP`. A missing token or project:
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<NorthflankConfig, Error> {
        let first = |ks: &[&str]| ks.iter().find_map(|k| vars.text(k));
        let token = first(&["NORTHFLANK_API_TOKEN", "NF_API_TOKEN"])
            .ok_or_else(|| vars.error("NORTHFLANK_API_TOKEN is not set"))?;
        let project = vars.required("NORTHFLANK_PROJECT_ID", "")?;
        let mut c = NorthflankConfig::new(token, project);
        if let Some(u) = first(&["NORTHFLANK_API_BASE_URL", "NF_API_HOST", "NF_HOST"]) {
            c.api_url = u;
        }
        c.team_id = vars.text("NORTHFLANK_TEAM_ID");
        c.instance_name = vars.text("NORTHFLANK_INSTANCE");
        c.container_name = vars.text("NORTHFLANK_CONTAINER");
        c.user = vars.text("NORTHFLANK_USER");
        c.group = vars.text("NORTHFLANK_GROUP");
        Ok(c)
    }

    execseam_adapter_kit::setters! {
        /// The API base (`https://api.northflank.com`); exec uses its host with `ws(s)://`.
        api_url: into String,
        /// The team, for the team-scoped routes (`/v1/teams/{t}/…`,
        /// `/v1/command-exec/teams/{t}/…`).
        team_id: some into String,
        /// The instance to run in (unset: one the proxy picks).
        instance_name: some into String,
        /// The container to run in (unset: the proxy picks).
        container_name: some into String,
        /// The user (name or uid) commands run as (unset: the image's `USER`).
        user: some into String,
        /// The group (name or gid) commands run with.
        group: some into String,
        /// The limit on a REST request and on the WebSocket handshake (default 60 s).
        request_timeout: Duration,
        /// The limit on making a connection (default 10 s).
        connect_timeout: Duration,
        /// The longest wait for each frame of the exec socket after the handshake (default 10
        /// min): the exec socket carries no keepalives, so a command silent for longer fails with
        /// `Timeout(Request)` (`Retry::Unsafe`: it may still run). Raise it for commands that are
        /// quiet for longer.
        idle_timeout: Duration,
        /// Raw stdin bytes per `payload` frame (default 64 KiB, the Python SDK's file-copy chunk).
        stdin_chunk: usize,
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
            return Err(vars::config_error(PROVIDER, "the API token is empty"));
        }
        if self.project_id.is_empty() {
            return Err(vars::config_error(PROVIDER, "the project id is empty"));
        }
        if self.stdin_chunk == 0 {
            return Err(vars::config_error(
                PROVIDER,
                "stdin_chunk must be at least 1 byte",
            ));
        }
        vars::parse_url(PROVIDER, "the API URL", &self.api_url, &["http", "https"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::ErrorKind;

    #[test]
    fn the_sdks_variables_are_read_and_required_ones_checked() {
        let c = crate::Northflank::config_from(&|k| match k {
            "NF_API_TOKEN" => Some("t".into()),
            "NORTHFLANK_PROJECT_ID" => Some("p".into()),
            "NF_HOST" => Some("http://127.0.0.1:1".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            (c.token(), c.project_id(), c.api_url.as_str()),
            ("t", "p", "http://127.0.0.1:1")
        );
        let e =
            crate::Northflank::config_from(&|k| (k == "NORTHFLANK_API_TOKEN").then(|| "t".into()))
                .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let e = NorthflankConfig::new("t", "p")
            .api_url("nope")
            .validate()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(!format!("{:?}", NorthflankConfig::new("sekrit", "p")).contains("sekrit"));
    }
}
