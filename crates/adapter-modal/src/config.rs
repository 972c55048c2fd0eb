//! [`ModalConfig`]: where the Modal API is, the token pair, and the defaults of created
//! sandboxes. Plain setters; everything is checked by [`ModalProvider::new`](crate::ModalProvider::new)
//! before any I/O.

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::secret_env::SecretEnv;
use execseam_adapter_kit::vars::{self, Vars};
use std::collections::BTreeMap;
use std::time::Duration;

use execseam_core::Error;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The Modal API (the first entry of the client's `server_url` default, `modal/config.py`).
pub const DEFAULT_SERVER_URL: &str = "https://api.modal.com";
/// The image of created sandboxes when neither the spec nor the config names one:
/// `Image.from_registry(tag)` with this tag (the wheel's `debian_slim` builds on the same
/// `python:*-slim-bookworm` images).
pub const DEFAULT_IMAGE: &str = "python:3.12-slim-bookworm";
/// The image builder version sent with `ImageGetOrCreate` unless configured.
pub const DEFAULT_IMAGE_BUILDER_VERSION: &str = "2025.06";
/// Modal's longest sandbox lifetime (24 h).
pub const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// How to reach Modal and what a created sandbox looks like. `Debug` never prints the token
/// secret or env values.
#[derive(Clone, Debug)]
pub struct ModalConfig {
    pub(crate) server_url: String,
    pub(crate) token_id: String,
    pub(crate) token_secret: SecretString,
    pub(crate) environment: Option<String>,
    pub(crate) app_name: String,
    pub(crate) image: String,
    pub(crate) image_builder_version: String,
    pub(crate) sandbox_timeout: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) workdir: Option<String>,
    pub(crate) sandbox_env: SecretEnv,
    pub(crate) tags: BTreeMap<String, String>,
    pub(crate) exec_timeout: Option<Duration>,
    pub(crate) exec_start_retries: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) stream_idle_timeout: Duration,
    pub(crate) client_type: i32,
    pub(crate) client_version: String,
    pub(crate) max_resumes: u32,
    pub(crate) terminate_on_drop: bool,
}

/// `http(s)://host[:port]`, without a path.
fn check_url(what: &str, raw: &str) -> Result<(), Error> {
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"));
    match rest {
        Some(r) if !r.is_empty() && !r.contains(['/', ' ', '\t', '\n']) => Ok(()),
        _ => Err(vars::config_error(
            PROVIDER,
            format!("{what} {raw:?} is not http(s)://host[:port]"),
        )),
    }
}

impl ModalConfig {
    /// Modal at [`DEFAULT_SERVER_URL`] with this token pair (`modal token new` makes one), and
    /// every default.
    pub fn new(token_id: impl Into<String>, token_secret: impl Into<String>) -> ModalConfig {
        ModalConfig {
            server_url: DEFAULT_SERVER_URL.to_owned(),
            token_id: token_id.into(),
            token_secret: SecretString::from(token_secret.into()),
            environment: None,
            app_name: "execseam".to_owned(),
            image: DEFAULT_IMAGE.to_owned(),
            image_builder_version: DEFAULT_IMAGE_BUILDER_VERSION.to_owned(),
            sandbox_timeout: Duration::from_secs(300),
            idle_timeout: None,
            workdir: None,
            sandbox_env: SecretEnv::default(),
            tags: BTreeMap::new(),
            exec_timeout: None,
            exec_start_retries: 0,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            stream_idle_timeout: Duration::from_secs(30),
            // libmodal's convention for clients other than the Python SDK: LIBMODAL (7) and
            // "1.0.0", the Python version it behaves like (js/src/client.ts, go/client.go).
            client_type: 7,
            client_version: "1.0.0".to_owned(),
            max_resumes: 10,
            terminate_on_drop: true,
        }
    }

    /// the variables in [`VARS`](crate::VARS) over the process environment.
    pub fn from_env() -> Result<ModalConfig, Error> {
        crate::Modal::config_from(&vars::env)
    }

    /// Reads the variables in [`VARS`](crate::VARS) as `vars` gives them (an unset or
    /// empty one keeps the default), as the official client reads them: `MODAL_TOKEN_ID` and
    /// `MODAL_TOKEN_SECRET` (required), `MODAL_SERVER_URL` (the first of a comma-separated
    /// list), `MODAL_ENVIRONMENT`; and `EXECSEAM_MODAL_APP`, `EXECSEAM_MODAL_IMAGE`,
    /// `EXECSEAM_MODAL_SANDBOX_TIMEOUT` and `EXECSEAM_MODAL_EXEC_TIMEOUT` (seconds). A missing
    /// token or a bad value is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<ModalConfig, Error> {
        let id = vars.text("MODAL_TOKEN_ID").ok_or_else(|| {
            vars::config_error(PROVIDER, "MODAL_TOKEN_ID is not set (`modal token new`)")
        })?;
        let secret = vars.text("MODAL_TOKEN_SECRET").ok_or_else(|| {
            vars::config_error(
                PROVIDER,
                "MODAL_TOKEN_SECRET is not set (`modal token new`)",
            )
        })?;
        let mut c = ModalConfig::new(id, secret);
        if let Some(url) = vars.text("MODAL_SERVER_URL") {
            let first = url
                .split(',')
                .next()
                .unwrap_or_default()
                .trim()
                .trim_end_matches('/');
            check_url("MODAL_SERVER_URL", first)?;
            c.server_url = first.to_owned();
        }
        c.environment = vars.text("MODAL_ENVIRONMENT");
        if let Some(app) = vars.text("EXECSEAM_MODAL_APP") {
            c.app_name = app;
        }
        if let Some(image) = vars.text("EXECSEAM_MODAL_IMAGE") {
            c.image = image;
        }
        if let Some(t) = vars.seconds("EXECSEAM_MODAL_SANDBOX_TIMEOUT")? {
            c.sandbox_timeout = t;
        }
        if let Some(t) = vars.seconds("EXECSEAM_MODAL_EXEC_TIMEOUT")? {
            c.exec_timeout = Some(t);
        }
        c.validate()?;
        Ok(c)
    }

    /// The API URL (`MODAL_SERVER_URL`): `https://host[:port]`, or `http://` for a local
    /// emulator.
    #[must_use]
    pub fn server_url(mut self, url: impl Into<String>) -> Self {
        self.server_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    execseam_adapter_kit::setters! {
        /// The Modal environment (`MODAL_ENVIRONMENT`; default: the workspace's default).
        environment: some into String,
        /// The app created sandboxes belong to, created if missing (default `execseam`).
        app_name: into String,
        /// The image of created sandboxes unless the spec names one: a registry tag
        /// (`Image.from_registry(tag)`), or the id of an image Modal already built (`im-…`).
        /// Default [`DEFAULT_IMAGE`].
        image: into String,
        /// The image builder version (default [`DEFAULT_IMAGE_BUILDER_VERSION`]).
        image_builder_version: into String,
        /// The lifetime of a created sandbox unless the spec sets one (`timeout`, default 300 s,
        /// at most 24 h); Modal ends it then.
        sandbox_timeout: Duration,
        /// Ends a created sandbox after this long idle (`idle_timeout`), unless the spec sets one.
        idle_timeout: some Duration,
        /// The working directory of created sandboxes (`Sandbox.create(workdir=)`), absolute.
        workdir: some into String,
    }

    execseam_adapter_kit::entry_setters! {
        /// An environment variable for every command of every created sandbox, under the spec's.
        sandbox_env => sandbox_env,
        /// A tag set on every created sandbox, under the spec's labels.
        tag => tags,
    }

    execseam_adapter_kit::setters! {
        /// Every command is killed by Modal after this long (`TaskExecStartRequest.timeout_secs`,
        /// whole seconds, rounded up), and the exec is `Err(Timeout(Command))`. Modal has no call
        /// that kills one command: this is the only way a command is ended server-side short of
        /// destroying the sandbox.
        exec_timeout: some Duration,
        /// Retries `TaskExecStart` this many times after a transport failure or a transient status,
        /// with the same `exec_id` (the router deduplicates on it, so the command runs at most once).
        /// Default 0: the failure is returned with its retry class.
        exec_start_retries: u32,
        /// How long to wait for a connection (default 10 s).
        connect_timeout: Duration,
        /// The deadline of each unary call (default 60 s); output streams and `TaskExecWait` have
        /// none (a command runs as long as it runs).
        request_timeout: Duration,
        /// How long an output stream or `TaskExecWait` may stay silent before the adapter asks the
        /// router whether the command still runs (`TaskExecPoll`, bounded by the request timeout):
        /// while it runs, the wait goes on (a silent command is not an error); once it exited, the
        /// exit is the poll's and an output stream still silent is `Err(Timeout(Request))`,
        /// `Retry::Unsafe`; a router that does not answer the poll ends the exec with its error.
        /// Default 30 s.
        stream_idle_timeout: Duration,
    }

    /// The `x-modal-client-type` and `x-modal-client-version` sent (default 7 and `1.0.0`, as
    /// libmodal; see `docs/adapters/modal.md` on what Modal accepts).
    #[must_use]
    pub fn client_identity(mut self, client_type: i32, version: impl Into<String>) -> Self {
        self.client_type = client_type;
        self.client_version = version.into();
        self
    }

    execseam_adapter_kit::setters! {
        /// How many times in a row an output stream is reopened from its offset after a transient
        /// failure without progress (default 10, as the client).
        max_resumes: u32,
        /// Terminate an owned sandbox that was never closed when its last handle is dropped (the
        /// safety net; default true).
        terminate_on_drop: bool,
    }

    /// The API URL.
    pub fn url(&self) -> &str {
        &self.server_url
    }

    /// The app name.
    pub fn app(&self) -> &str {
        &self.app_name
    }

    /// Checks every setting that can be wrong, before any I/O.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        check_url("the server URL", &self.server_url)?;
        for (what, v) in [
            ("token id", self.token_id.as_str()),
            ("token secret", self.token_secret.expose_secret()),
        ] {
            if v.is_empty() {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("the Modal {what} is empty"),
                ));
            }
            if !v.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("the Modal {what} is not printable ASCII without spaces"),
                ));
            }
        }
        let app_ok = !self.app_name.is_empty()
            && self.app_name.len() <= 64
            && self
                .app_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !app_ok {
            return Err(vars::config_error(
                PROVIDER,
                format!("app name {:?}: up to 64 of [A-Za-z0-9-_.]", self.app_name),
            ));
        }
        check_image(&self.image)?;
        check_lifetime("the sandbox timeout", self.sandbox_timeout)?;
        if let Some(d) = &self.workdir
            && !d.starts_with('/')
        {
            return Err(vars::config_error(
                PROVIDER,
                format!("workdir {d:?} must be an absolute path"),
            ));
        }
        if self
            .idle_timeout
            .is_some_and(|d| d < Duration::from_secs(1))
        {
            return Err(vars::config_error(
                PROVIDER,
                "the idle timeout must be at least 1 s",
            ));
        }
        if self.exec_timeout.is_some_and(|d| d.is_zero()) {
            return Err(vars::config_error(
                PROVIDER,
                "the exec timeout must not be zero",
            ));
        }
        for key in self.sandbox_env.keys() {
            if key.is_empty() || key.contains(['=', '\0']) {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("sandbox env key {key:?} is not a variable name"),
                ));
            }
        }
        Ok(())
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

/// A registry tag, or an image id (`im-…`).
pub(crate) fn check_image(image: &str) -> Result<(), Error> {
    if image.is_empty() || image.contains(char::is_whitespace) {
        return Err(vars::config_error(
            PROVIDER,
            format!("image {image:?} is neither a registry tag nor an image id"),
        ));
    }
    Ok(())
}

pub(crate) fn check_lifetime(what: &str, d: Duration) -> Result<(), Error> {
    if d < Duration::from_secs(1) || d > MAX_LIFETIME {
        return Err(vars::config_error(
            PROVIDER,
            format!("{what} must be between 1 s and 24 h, got {d:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::ErrorKind;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn from_vars_reads_what_the_client_reads() {
        let c = crate::Modal::config_from(&vars(&[
            ("MODAL_TOKEN_ID", "ak-1"),
            ("MODAL_TOKEN_SECRET", "as-1"),
            ("MODAL_SERVER_URL", "http://127.0.0.1:9000/,https://b"),
            ("EXECSEAM_MODAL_EXEC_TIMEOUT", "30"),
        ]))
        .unwrap();
        assert_eq!(c.url(), "http://127.0.0.1:9000");
        assert!(c.is_localhost());
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(30)));
        let c = crate::Modal::config_from(&vars(&[
            ("MODAL_TOKEN_ID", "ak-1"),
            ("MODAL_TOKEN_SECRET", "as-1"),
        ]))
        .unwrap();
        assert_eq!(c.url(), DEFAULT_SERVER_URL);
        assert!(!c.is_localhost());
    }

    #[test]
    fn bad_configuration_is_invalid_config_before_any_call() {
        let missing = crate::Modal::config_from(&vars(&[("MODAL_TOKEN_ID", "ak-1")])).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::InvalidConfig);
        let bad = |c: ModalConfig| c.validate().unwrap_err().kind();
        let ok = || ModalConfig::new("ak-1", "as-1");
        assert!(ok().validate().is_ok());
        assert_eq!(bad(ModalConfig::new("", "as")), ErrorKind::InvalidConfig);
        assert_eq!(
            bad(ModalConfig::new("ak 1", "as")),
            ErrorKind::InvalidConfig
        );
        for url in ["ftp://x", "https://", "https://a/b", "127.0.0.1:80"] {
            assert_eq!(bad(ok().server_url(url)), ErrorKind::InvalidConfig, "{url}");
        }
        assert_eq!(bad(ok().workdir("rel")), ErrorKind::InvalidConfig);
        assert_eq!(bad(ok().app_name("a b")), ErrorKind::InvalidConfig);
        assert_eq!(bad(ok().image("a b")), ErrorKind::InvalidConfig);
        assert_eq!(
            bad(ok().sandbox_timeout(Duration::from_secs(90_000))),
            ErrorKind::InvalidConfig
        );
        assert_eq!(bad(ok().sandbox_env("A=B", "x")), ErrorKind::InvalidConfig);
        let e = crate::Modal::config_from(&vars(&[
            ("MODAL_TOKEN_ID", "ak-1"),
            ("MODAL_TOKEN_SECRET", "as-1"),
            ("EXECSEAM_MODAL_SANDBOX_TIMEOUT", "soon"),
        ]))
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn debug_never_shows_the_secret_or_env_values() {
        let c = ModalConfig::new("ak-1", "as-topsecret").sandbox_env("K", "hidden-value");
        let s = format!("{c:?}");
        assert!(
            !s.contains("topsecret") && !s.contains("hidden-value"),
            "{s}"
        );
        assert!(s.contains("ak-1"));
    }
}
