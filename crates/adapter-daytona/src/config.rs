//! Configuration of the Daytona adapter.

use std::fmt;
use std::time::Duration;

use execseam_core::{Error, ErrorKind};
use secrecy::SecretString;

/// Daytona Cloud's API.
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";

/// Which sandbox the adapter runs commands in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxChoice {
    /// An existing sandbox, by id or name.
    Existing(String),
    /// A new sandbox created by [`DaytonaExec::connect`](crate::DaytonaExec::connect) (from the
    /// organization's default snapshot, or the one named here).
    Create {
        /// The snapshot, if not the default.
        snapshot: Option<String>,
    },
}

/// How to reach Daytona. Build with [`DaytonaConfig::new`] or [`DaytonaConfig::from_env`].
///
/// `Debug` never prints the token.
#[derive(Clone)]
pub struct DaytonaConfig {
    pub(crate) api_url: String,
    pub(crate) token: SecretString,
    pub(crate) organization_id: Option<String>,
    pub(crate) target: Option<String>,
    pub(crate) sandbox: SandboxChoice,
    pub(crate) temp_dir: String,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) start_timeout: Duration,
}

impl fmt::Debug for DaytonaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaConfig")
            .field("api_url", &self.api_url)
            .field("token", &"<redacted>")
            .field("organization_id", &self.organization_id)
            .field("target", &self.target)
            .field("sandbox", &self.sandbox)
            .field("temp_dir", &self.temp_dir)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("start_timeout", &self.start_timeout)
            .finish()
    }
}

impl DaytonaConfig {
    /// An API key (or a JWT with [`organization_id`](Self::organization_id)) against
    /// [`DEFAULT_API_URL`], creating a sandbox on connect.
    pub fn new(token: impl Into<String>) -> DaytonaConfig {
        DaytonaConfig {
            api_url: DEFAULT_API_URL.into(),
            token: SecretString::from(token.into()),
            organization_id: None,
            target: None,
            sandbox: SandboxChoice::Create { snapshot: None },
            temp_dir: "/tmp".into(),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(120),
        }
    }

    /// Reads the same variables as the official SDKs, plus the sandbox to use:
    ///
    /// - `DAYTONA_API_KEY`, or `DAYTONA_JWT_TOKEN` with `DAYTONA_ORGANIZATION_ID` (required);
    /// - `DAYTONA_API_URL` (default [`DEFAULT_API_URL`]; the deprecated `DAYTONA_SERVER_URL` too);
    /// - `DAYTONA_TARGET` (region for a created sandbox);
    /// - `DAYTONA_SANDBOX_ID` (an existing sandbox, by id or name; without it one is created,
    ///   from `DAYTONA_SNAPSHOT` if set);
    /// - `EXECSEAM_DAYTONA_TEMP_DIR` (where stdin files go, default `/tmp`).
    pub fn from_env() -> Result<DaytonaConfig, Error> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (token, org) = match (var("DAYTONA_API_KEY"), var("DAYTONA_JWT_TOKEN")) {
            (Some(key), _) => (key, var("DAYTONA_ORGANIZATION_ID")),
            (None, Some(jwt)) => {
                let org = var("DAYTONA_ORGANIZATION_ID").ok_or_else(|| {
                    config_error("DAYTONA_ORGANIZATION_ID is required with DAYTONA_JWT_TOKEN")
                })?;
                (jwt, Some(org))
            }
            (None, None) => {
                return Err(config_error(
                    "set DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID",
                ));
            }
        };
        let mut c = DaytonaConfig::new(token);
        c.organization_id = org;
        if let Some(url) = var("DAYTONA_API_URL").or_else(|| var("DAYTONA_SERVER_URL")) {
            c.api_url = url;
        }
        c.target = var("DAYTONA_TARGET");
        c.sandbox = match var("DAYTONA_SANDBOX_ID") {
            Some(id) => SandboxChoice::Existing(id),
            None => SandboxChoice::Create {
                snapshot: var("DAYTONA_SNAPSHOT"),
            },
        };
        if let Some(dir) = var("EXECSEAM_DAYTONA_TEMP_DIR") {
            c = c.temp_dir(dir)?;
        }
        Ok(c)
    }

    /// The control-plane base URL (`…/api`).
    #[must_use]
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = url.into();
        self
    }

    /// Sends `X-Daytona-Organization-ID` (needed with a JWT).
    #[must_use]
    pub fn organization_id(mut self, org: impl Into<String>) -> Self {
        self.organization_id = Some(org.into());
        self
    }

    /// The region for created sandboxes.
    #[must_use]
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// Uses an existing sandbox (id or name).
    #[must_use]
    pub fn sandbox(mut self, id_or_name: impl Into<String>) -> Self {
        self.sandbox = SandboxChoice::Existing(id_or_name.into());
        self
    }

    /// Creates a sandbox on connect, from `snapshot` or the default.
    #[must_use]
    pub fn create_sandbox(mut self, snapshot: Option<String>) -> Self {
        self.sandbox = SandboxChoice::Create { snapshot };
        self
    }

    /// The directory in the sandbox for stdin files (absolute; default `/tmp`).
    pub fn temp_dir(mut self, dir: impl Into<String>) -> Result<Self, Error> {
        let dir = dir.into();
        if !dir.starts_with('/') || dir.contains('\0') {
            return Err(config_error("the temp dir must be an absolute path"));
        }
        self.temp_dir = dir;
        Ok(self)
    }

    /// The timeout of each control or files request. The request that runs a command has none:
    /// commands take as long as they take (use a host deadline layer).
    #[must_use]
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    /// The TCP/TLS connect timeout.
    #[must_use]
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// How long [`DaytonaExec::connect`](crate::DaytonaExec::connect) waits for a sandbox to
    /// reach `started`.
    #[must_use]
    pub fn start_timeout(mut self, t: Duration) -> Self {
        self.start_timeout = t;
        self
    }
}

fn config_error(msg: &str) -> Error {
    Error::new(ErrorKind::InvalidCommand, msg)
        .with_provider("daytona")
        .with_operation("config")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_token() {
        let c = DaytonaConfig::new("dtn_secret_value").organization_id("org");
        let s = format!("{c:?} {c:#?}");
        assert!(!s.contains("dtn_secret_value"), "{s}");
        assert!(s.contains("<redacted>"));
    }

    #[test]
    fn temp_dir_must_be_absolute() {
        assert!(DaytonaConfig::new("k").temp_dir("tmp").is_err());
        assert!(DaytonaConfig::new("k").temp_dir("/var/tmp").is_ok());
    }
}
