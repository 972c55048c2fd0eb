//! Configuration of the Fly Machines adapter.

use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The public Machines API (what fly-go uses unless `FLY_FLAPS_BASE_URL` says otherwise).
pub const DEFAULT_BASE_URL: &str = "https://api.machines.dev";

/// Which app the adapter manages machines in, and how it runs commands. Built with
/// [`FlyConfig::new`] and the setters, or [`FlyConfig::from_env`]; checked by
/// [`FlyProvider::new`](crate::FlyProvider::new). `Debug` never shows the token.
#[derive(Clone, Debug)]
pub struct FlyConfig {
    pub(crate) base_url: String,
    pub(crate) token: SecretString,
    pub(crate) app: String,
    pub(crate) image: Option<String>,
    pub(crate) region: Option<String>,
    pub(crate) exec_timeout: Duration,
    pub(crate) request_slack: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) temp_dir: String,
    pub(crate) max_stdin: u64,
    pub(crate) max_answer_bytes: usize,
    pub(crate) container: Option<String>,
    pub(crate) lease_nonce: Option<SecretString>,
    pub(crate) start_timeout: Duration,
    pub(crate) create_timeout: Duration,
}

/// The default [`FlyConfig::max_answer_bytes`]: both streams at the API's 2 MiB output cap,
/// JSON-escaped (up to six bytes a byte), plus 64 KiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 2 * 6 * (2 << 20) + (64 << 10);

impl FlyConfig {
    /// A configuration for the machines of app `app`, against the public Machines API.
    ///
    /// The token is a Fly API token: a macaroon (`fm2_…`, as `fly tokens create` prints it, with or
    /// without its `FlyV1 ` prefix) is sent as `Authorization: FlyV1 …`, anything else as
    /// `Authorization: Bearer …`, exactly as fly-go does.
    pub fn new(app: impl Into<String>, token: impl Into<String>) -> FlyConfig {
        FlyConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            token: SecretString::from(token.into()),
            app: app.into(),
            image: None,
            region: None,
            exec_timeout: Duration::from_secs(120),
            request_slack: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            temp_dir: "/tmp".to_owned(),
            max_stdin: 1 << 20,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            container: None,
            lease_nonce: None,
            start_timeout: Duration::from_secs(180),
            create_timeout: Duration::from_secs(60),
        }
    }

    /// Reads the variables in [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<FlyConfig, Error> {
        crate::Fly::config_from(&vars::env)
    }

    /// Reads the configuration from `vars` (unset or empty keeps the default):
    ///
    /// - `FLY_API_TOKEN` (required): the token;
    /// - `FLY_APP_NAME` (required): the app;
    /// - `FLY_FLAPS_BASE_URL` (optional, fly-go's name): the Machines API base URL;
    /// - `FLY_EXEC_TIMEOUT` (optional): seconds, sent as the exec's `timeout`;
    /// - `FLY_EXEC_CONTAINER` (optional): the container of a multi-container machine;
    /// - `EXECSEAM_FLY_IMAGE`, `EXECSEAM_FLY_REGION` (optional): the image and region of created
    ///   machines when the spec names none.
    ///
    /// A missing or malformed setting is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<FlyConfig, Error> {
        let token = vars.required("FLY_API_TOKEN", "")?;
        let app = vars.required("FLY_APP_NAME", "")?;
        let mut c = FlyConfig::new(app, token);
        if let Some(url) = vars.text("FLY_FLAPS_BASE_URL") {
            c = c.base_url(url);
        }
        if let Some(t) = vars.seconds("FLY_EXEC_TIMEOUT")? {
            c = c.exec_timeout(t);
        }
        if let Some(container) = vars.text("FLY_EXEC_CONTAINER") {
            c = c.container(container);
        }
        c.image = vars.text("EXECSEAM_FLY_IMAGE");
        c.region = vars.text("EXECSEAM_FLY_REGION");
        c.validate()?;
        Ok(c)
    }

    /// Checks what can be wrong before any I/O.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        // Parsed whole here, so no request can fail on the URL later.
        vars::parse_url(
            PROVIDER,
            "the Machines API URL",
            &self.base_url,
            &["http", "https"],
        )?;
        if self.app.is_empty() {
            return Err(vars::config_error(PROVIDER, "the app name is empty"));
        }
        if self.token.expose_secret().trim().is_empty() {
            return Err(vars::config_error(PROVIDER, "the API token is empty"));
        }
        if !self.temp_dir.starts_with('/') {
            return Err(vars::config_error(
                PROVIDER,
                "the temp dir must be absolute",
            ));
        }
        Ok(())
    }

    execseam_adapter_kit::setters! {
        /// The image of created machines when the spec names none.
        image: some into String,
        /// The region of created machines (default: the API's choice).
        region: some into String,
    }

    /// The Machines API base URL (default [`DEFAULT_BASE_URL`]; `http://_api.internal:4280` from
    /// inside a Fly private network; an emulator's URL in tests).
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    execseam_adapter_kit::setters! {
        /// The command deadline sent as the exec's `timeout` (whole seconds, at least 1; default
        /// 120 s). The HTTP request itself may take this plus
        /// [`request_slack`](Self::request_slack).
        exec_timeout: Duration => .max(Duration::from_secs(1)),
        /// How much longer than the exec timeout the HTTP request may take, so that the server's
        /// own deadline fires first (default 30 s).
        request_slack: Duration,
        /// The TCP/TLS connect timeout (default 10 s).
        connect_timeout: Duration,
        /// A writable directory in the machine for the binary-stdin temporary file (default
        /// `/tmp`).
        temp_dir: into String,
        /// The largest stdin accepted, in bytes (default 1 MiB, flyctl's own cap); larger stdin is
        /// rejected with `InvalidCommand` before any request.
        max_stdin: u64,
        /// The most of an exec answer read (default [`DEFAULT_MAX_ANSWER_BYTES`]: both streams at
        /// the API's 2 MiB output cap, JSON-escaped at up to six bytes a byte, plus 64 KiB);
        /// machine and lease answers are read up to the smaller of this and 4 MiB. A larger (or
        /// endless) answer fails with `OutputLimit` (`Retry::Unsafe` for the exec, `Never` for the
        /// others) instead of being collected whole.
        max_answer_bytes: usize => .max(1024),
        /// The container to run in, for a multi-container machine (the `container` field).
        container: some into String,
        /// A lease nonce this caller holds; sent as `fly-machine-lease-nonce` on every request.
        lease_nonce: some into SecretString,
        /// How long [`FlyExec::ensure_started`](crate::FlyExec::ensure_started) may take in total
        /// (default 180 s).
        start_timeout: Duration,
        /// How long the create request (`POST /v1/apps/{app}/machines`) may take, its answer
        /// included (default 60 s). An answer that does not come in time is an error after the send
        /// (the machine may exist): the facade's guard looks for it by its create tag.
        create_timeout: Duration,
    }

    /// The app name.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// The `Authorization` header value, normalised as fly-go's `Tokens::FlapsHeader` does: any
    /// `Bearer`/`FlyV1` scheme pasted into the token is stripped; macaroons (`fm1r_`, `fm1a_`,
    /// `fm2_`) are sent as `FlyV1 m1,m2`, other tokens as `Bearer t`.
    pub(crate) fn authorization(&self) -> String {
        authorization(self.token.expose_secret())
    }
}

pub(crate) fn authorization(raw: &str) -> String {
    let mut token = raw.trim();
    loop {
        match token.split_once(' ') {
            Some((scheme, rest))
                if scheme.eq_ignore_ascii_case("bearer")
                    || scheme.eq_ignore_ascii_case("flyv1") =>
            {
                token = rest.trim();
            }
            _ => break,
        }
    }
    let (mut macaroons, mut others) = (Vec::new(), Vec::new());
    for t in token.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match t.split_once('_').map(|(p, _)| p) {
            Some("fm1r" | "fm1a" | "fm2") => macaroons.push(t),
            _ => others.push(t),
        }
    }
    if macaroons.is_empty() {
        format!("Bearer {}", others.join(","))
    } else {
        format!("FlyV1 {}", macaroons.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_follows_fly_go() {
        assert_eq!(authorization("abc"), "Bearer abc");
        assert_eq!(authorization("Bearer abc"), "Bearer abc");
        assert_eq!(authorization("FlyV1 fm2_xyz"), "FlyV1 fm2_xyz");
        assert_eq!(
            authorization("Bearer FlyV1 fm2_a,fm2_b"),
            "FlyV1 fm2_a,fm2_b"
        );
        assert_eq!(authorization("fm1r_a, oauth"), "FlyV1 fm1r_a");
    }

    #[test]
    fn debug_redacts_the_token() {
        let c = FlyConfig::new("app", "fm2_supersecret").lease_nonce("n0nce");
        let d = format!("{c:?}");
        assert!(!d.contains("supersecret"), "{d}");
        assert!(!d.contains("n0nce"), "{d}");
    }
}
