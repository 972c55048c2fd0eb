//! Configuration of [`ModalExec`](crate::ModalExec): where the Modal API is, the token pair, and
//! what a created sandbox looks like.

use std::fmt;
use std::time::Duration;

use execseam_core::{Error, ErrorKind};
use secrecy::SecretString;

use crate::error::PROVIDER;

/// The Modal API (the first entry of the client's `server_url` default, `modal/config.py`).
pub const DEFAULT_SERVER_URL: &str = "https://api.modal.com";
/// The image a created sandbox runs when none is configured: `Image.from_registry(tag)` with
/// this tag (the wheel's `debian_slim` builds on the same `python:*-slim-bookworm` images).
pub const DEFAULT_IMAGE: &str = "python:3.12-slim-bookworm";
/// The image builder version sent with `ImageGetOrCreate` when none is configured.
pub const DEFAULT_IMAGE_BUILDER_VERSION: &str = "2025.06";

/// Environment variable: the API URL (as the official client reads it).
pub const ENV_SERVER_URL: &str = "MODAL_SERVER_URL";
/// Environment variable: the token id (`ak-…`).
pub const ENV_TOKEN_ID: &str = "MODAL_TOKEN_ID";
/// Environment variable: the token secret (`as-…`).
pub const ENV_TOKEN_SECRET: &str = "MODAL_TOKEN_SECRET";
/// Environment variable (optional): the Modal environment.
pub const ENV_ENVIRONMENT: &str = "MODAL_ENVIRONMENT";
/// Environment variable (optional): the app created sandboxes belong to (default `execseam`).
pub const ENV_APP: &str = "EXECSEAM_MODAL_APP";
/// Environment variable (optional): a sandbox to connect to instead of creating one.
pub const ENV_SANDBOX_ID: &str = "EXECSEAM_MODAL_SANDBOX_ID";

/// Every variable [`ModalConfig::from_env`] and [`ModalExec::from_env`](crate::ModalExec::from_env) read.
pub const ENV: &[&str] = &[
    ENV_SERVER_URL,
    ENV_TOKEN_ID,
    ENV_TOKEN_SECRET,
    ENV_ENVIRONMENT,
    ENV_APP,
    ENV_SANDBOX_ID,
];

/// How to reach Modal and what to create.
#[derive(Clone)]
pub struct ModalConfig {
    pub(crate) server_url: String,
    pub(crate) token_id: String,
    pub(crate) token_secret: SecretString,
    pub(crate) environment: Option<String>,
    pub(crate) app_name: String,
    pub(crate) image: String,
    pub(crate) image_id: Option<String>,
    pub(crate) image_builder_version: String,
    pub(crate) sandbox_timeout: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) workdir: Option<String>,
    pub(crate) exec_timeout: Option<Duration>,
    pub(crate) exec_start_retries: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) client_type: i32,
    pub(crate) client_version: String,
    pub(crate) max_resumes: u32,
}

impl fmt::Debug for ModalConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModalConfig")
            .field("server_url", &self.server_url)
            .field("token_id", &self.token_id)
            .field("token_secret", &"<redacted>")
            .field("environment", &self.environment)
            .field("app_name", &self.app_name)
            .field("image", &self.image)
            .field("image_id", &self.image_id)
            .field("sandbox_timeout", &self.sandbox_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("workdir", &self.workdir)
            .field("exec_timeout", &self.exec_timeout)
            .field("exec_start_retries", &self.exec_start_retries)
            .finish_non_exhaustive()
    }
}

pub(crate) fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidCommand, message)
        .with_provider(PROVIDER)
        .with_operation("config")
}

fn check_url(raw: &str) -> Result<String, Error> {
    let url = raw.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| config_error(format!("server URL {raw:?} is not http(s)://host[:port]")))?;
    if rest.is_empty() || rest.contains('/') || rest.contains(char::is_whitespace) {
        return Err(config_error(format!(
            "server URL {raw:?} is not http(s)://host[:port]"
        )));
    }
    Ok(url.to_owned())
}

impl ModalConfig {
    /// Modal at [`DEFAULT_SERVER_URL`] with the token pair (`modal token new` makes one).
    pub fn new(
        token_id: impl Into<String>,
        token_secret: impl Into<String>,
    ) -> Result<ModalConfig, Error> {
        let token_id = token_id.into();
        let token_secret = token_secret.into();
        if token_id.trim().is_empty() || token_secret.trim().is_empty() {
            return Err(config_error(
                "the Modal token id and secret must both be set (MODAL_TOKEN_ID, MODAL_TOKEN_SECRET)",
            ));
        }
        for (what, v) in [("token id", &token_id), ("token secret", &token_secret)] {
            if !v.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(config_error(format!(
                    "the Modal {what} must be printable ASCII without spaces"
                )));
            }
        }
        Ok(ModalConfig {
            server_url: DEFAULT_SERVER_URL.to_owned(),
            token_id,
            token_secret: SecretString::from(token_secret),
            environment: None,
            app_name: "execseam".to_owned(),
            image: DEFAULT_IMAGE.to_owned(),
            image_id: None,
            image_builder_version: DEFAULT_IMAGE_BUILDER_VERSION.to_owned(),
            sandbox_timeout: Duration::from_secs(300),
            idle_timeout: None,
            workdir: None,
            exec_timeout: None,
            exec_start_retries: 0,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            // libmodal's convention for clients that are not the Python SDK: LIBMODAL (7) and
            // "1.0.0", the Python version it behaves like (js/src/client.ts, go/client.go).
            client_type: 7,
            client_version: "1.0.0".to_owned(),
            max_resumes: 10,
        })
    }

    /// From the environment: [`ENV_TOKEN_ID`] and [`ENV_TOKEN_SECRET`] (required),
    /// [`ENV_SERVER_URL`] (the first of a comma-separated list, as the client takes it),
    /// [`ENV_ENVIRONMENT`] and [`ENV_APP`].
    pub fn from_env() -> Result<ModalConfig, Error> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let id =
            var(ENV_TOKEN_ID).ok_or_else(|| config_error(format!("{ENV_TOKEN_ID} is not set")))?;
        let secret = var(ENV_TOKEN_SECRET)
            .ok_or_else(|| config_error(format!("{ENV_TOKEN_SECRET} is not set")))?;
        let mut c = ModalConfig::new(id, secret)?;
        if let Some(url) = var(ENV_SERVER_URL) {
            c = c.server_url(url.split(',').next().unwrap_or_default())?;
        }
        if let Some(env) = var(ENV_ENVIRONMENT) {
            c = c.environment(env);
        }
        if let Some(app) = var(ENV_APP) {
            c = c.app_name(app)?;
        }
        Ok(c)
    }

    /// The API URL, `https://host[:port]` (or `http://` for a local emulator).
    pub fn server_url(mut self, url: impl AsRef<str>) -> Result<ModalConfig, Error> {
        self.server_url = check_url(url.as_ref())?;
        Ok(self)
    }

    /// The Modal environment (default: the workspace's default).
    #[must_use]
    pub fn environment(mut self, name: impl Into<String>) -> ModalConfig {
        self.environment = Some(name.into());
        self
    }

    /// The app created sandboxes belong to, created if missing (default `execseam`).
    pub fn app_name(mut self, name: impl Into<String>) -> Result<ModalConfig, Error> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return Err(config_error(format!(
                "app name {name:?}: up to 64 of [A-Za-z0-9-_.]"
            )));
        }
        self.app_name = name;
        Ok(self)
    }

    /// The registry image of created sandboxes (`Image.from_registry(tag)`; default
    /// [`DEFAULT_IMAGE`]).
    pub fn image(mut self, tag: impl Into<String>) -> Result<ModalConfig, Error> {
        let tag = tag.into();
        if tag.is_empty() || tag.contains(char::is_whitespace) {
            return Err(config_error(format!(
                "image tag {tag:?} is not a registry tag"
            )));
        }
        self.image = tag;
        self.image_id = None;
        Ok(self)
    }

    /// An image Modal already built (`im-…`), used as is.
    pub fn image_id(mut self, id: impl Into<String>) -> Result<ModalConfig, Error> {
        let id = id.into();
        if !id.starts_with("im-") {
            return Err(config_error(format!(
                "image id {id:?} does not start with im-"
            )));
        }
        self.image_id = Some(id);
        Ok(self)
    }

    /// The image builder version (default [`DEFAULT_IMAGE_BUILDER_VERSION`]).
    #[must_use]
    pub fn image_builder_version(mut self, version: impl Into<String>) -> ModalConfig {
        self.image_builder_version = version.into();
        self
    }

    /// The lifetime of a created sandbox (`timeout`, default 300 s, at most 24 h); Modal ends
    /// it then.
    pub fn sandbox_timeout(mut self, timeout: Duration) -> Result<ModalConfig, Error> {
        if timeout < Duration::from_secs(1) || timeout > Duration::from_secs(24 * 3600) {
            return Err(config_error(
                "the sandbox timeout must be between 1 s and 24 h",
            ));
        }
        self.sandbox_timeout = timeout;
        Ok(self)
    }

    /// Ends a created sandbox after this long without activity (`idle_timeout`).
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> ModalConfig {
        self.idle_timeout = Some(timeout);
        self
    }

    /// The working directory of a created sandbox (`Sandbox.create(workdir=)`), absolute.
    pub fn workdir(mut self, dir: impl Into<String>) -> Result<ModalConfig, Error> {
        let dir = dir.into();
        if !dir.starts_with('/') {
            return Err(config_error(format!(
                "workdir {dir:?} must be an absolute path"
            )));
        }
        self.workdir = Some(dir);
        Ok(self)
    }

    /// Every command is killed by Modal after this long (`TaskExecStartRequest.timeout_secs`,
    /// whole seconds, rounded up). Modal has no other way to kill a command: see the crate docs.
    #[must_use]
    pub fn exec_timeout(mut self, timeout: Duration) -> ModalConfig {
        self.exec_timeout = Some(timeout);
        self
    }

    /// Retries `TaskExecStart` this many times after a transport failure or a transient status,
    /// with the same `exec_id` (the router deduplicates on it, so the command still runs at most
    /// once). Default 0: the failure is returned with its retry class.
    #[must_use]
    pub fn exec_start_retries(mut self, n: u32) -> ModalConfig {
        self.exec_start_retries = n;
        self
    }

    /// How long to wait for a connection (default 10 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> ModalConfig {
        self.connect_timeout = timeout;
        self
    }

    /// The deadline of each unary call (default 60 s); output streams and `TaskExecWait` have
    /// none (a command runs as long as it runs).
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> ModalConfig {
        self.request_timeout = timeout;
        self
    }

    /// The `x-modal-client-type` and `x-modal-client-version` sent (default 7, `1.0.0`: see
    /// `docs/adapters/modal.md` on what Modal accepts).
    #[must_use]
    pub fn client_identity(mut self, client_type: i32, version: impl Into<String>) -> ModalConfig {
        self.client_type = client_type;
        self.client_version = version.into();
        self
    }

    /// How many times in a row an output stream is reopened from its offset after a transient
    /// failure without progress (default 10, as the client).
    #[must_use]
    pub fn max_resumes(mut self, n: u32) -> ModalConfig {
        self.max_resumes = n;
        self
    }

    /// The API URL.
    pub fn url(&self) -> &str {
        &self.server_url
    }

    /// The app name.
    pub fn app(&self) -> &str {
        &self.app_name
    }

    /// True for a loopback server: only then does the client accept an `http://` router URL
    /// (`_task_command_router_client.py` `_connect`, `client.py` `_is_localhost`).
    pub(crate) fn is_localhost(&self) -> bool {
        let host = self
            .server_url
            .split_once("://")
            .map(|(_, r)| r)
            .unwrap_or_default();
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        matches!(
            host,
            "localhost" | "127.0.0.1" | "[::1]" | "::1" | "172.21.0.1"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_happens_before_any_call() {
        assert!(ModalConfig::new("", "x").is_err());
        assert!(ModalConfig::new("ak-1", " ").is_err());
        assert!(ModalConfig::new("ak 1", "as-1").is_err());
        let c = ModalConfig::new("ak-1", "as-1").unwrap();
        assert_eq!(c.url(), DEFAULT_SERVER_URL);
        assert!(!c.is_localhost());
        let c = c.server_url("http://127.0.0.1:9000/").unwrap();
        assert_eq!(c.url(), "http://127.0.0.1:9000");
        assert!(c.is_localhost());
        for bad in ["ftp://x", "https://", "https://a/b", "127.0.0.1:80"] {
            assert!(
                ModalConfig::new("a", "b").unwrap().server_url(bad).is_err(),
                "{bad}"
            );
        }
        let e = ModalConfig::new("a", "b")
            .unwrap()
            .workdir("rel")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand);
        assert!(ModalConfig::new("a", "b").unwrap().app_name("a b").is_err());
        assert!(ModalConfig::new("a", "b").unwrap().image_id("x").is_err());
        assert!(
            ModalConfig::new("a", "b")
                .unwrap()
                .sandbox_timeout(Duration::from_secs(90_000))
                .is_err()
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let c = ModalConfig::new("ak-1", "as-topsecret").unwrap();
        let s = format!("{c:?}");
        assert!(!s.contains("topsecret"), "{s}");
        assert!(s.contains("ak-1"));
    }
}
