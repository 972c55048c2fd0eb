//! Configuration of the Daytona adapter.

use std::time::Duration;

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::attached::TerminalMode;
use execseam_adapter_kit::vars::{self, Vars};
use execseam_core::Error;
use secrecy::SecretString;

/// Daytona Cloud's API.
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";

/// The default [`DaytonaConfig::max_output`]: 64 MiB per stream.
pub const DEFAULT_MAX_OUTPUT: u64 = 64 << 20;

/// The default [`DaytonaConfig::max_answer_bytes`]: 16 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 16 << 20;

/// How to reach Daytona, and the defaults for new sandboxes. Build with [`DaytonaConfig::new`]
/// and the setters, or [`DaytonaConfig::from_env`]; checked by
/// [`DaytonaProvider::new`](crate::DaytonaProvider::new). `Debug` never prints the token.
#[derive(Clone, Debug)]
pub struct DaytonaConfig {
    pub(crate) api_url: String,
    pub(crate) token: SecretString,
    pub(crate) organization_id: Option<String>,
    pub(crate) target: Option<String>,
    pub(crate) snapshot: Option<String>,
    pub(crate) temp_dir: String,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_output: u64,
    pub(crate) max_answer_bytes: usize,
    pub(crate) session_pool: usize,
    pub(crate) exec_route: ExecRoute,
    pub(crate) toolbox_url: Option<String>,
    pub(crate) terminal: TerminalMode,
    pub(crate) signed_previews: Option<Duration>,
}

/// Which daemon route runs [`Exec::exec`](execseam_core::Exec::exec) (streams always run in a
/// session: only a session's log can be followed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecRoute {
    /// `POST /process/execute` (the default): one request, answered when the command ends. The
    /// adapter's frame writes the two streams to files and sends them back tagged and
    /// base64-encoded, so they stay apart although the route merges them. A synchronous
    /// session exec is answered only when the daemon's 50 ms poll of the exit-code file sees the
    /// code (`apps/daemon/pkg/session/execute.go`), about 50 ms per exec.
    #[default]
    Execute,
    /// The synchronous session exec of a pooled session ([`DaytonaConfig::session_pool`]): a
    /// command's background children end when its session is deleted (at `close`).
    Session,
}

/// The default [`DaytonaConfig::session_pool`]: idle sessions a handle keeps for reuse.
pub const DEFAULT_SESSION_POOL: usize = 4;

impl DaytonaConfig {
    /// An API key (or a JWT with [`organization_id`](Self::organization_id)) against
    /// [`DEFAULT_API_URL`].
    pub fn new(token: impl Into<String>) -> DaytonaConfig {
        DaytonaConfig {
            api_url: DEFAULT_API_URL.into(),
            token: SecretString::from(token.into()),
            organization_id: None,
            target: None,
            snapshot: None,
            temp_dir: "/tmp".into(),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(30),
            max_output: DEFAULT_MAX_OUTPUT,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            session_pool: DEFAULT_SESSION_POOL,
            exec_route: ExecRoute::default(),
            toolbox_url: None,
            terminal: TerminalMode::Recorder,
            signed_previews: None,
        }
    }

    /// Reads the variables in [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<DaytonaConfig, Error> {
        crate::Daytona::config_from(&vars::env)
    }

    /// Reads the same variables as the official SDKs, as `vars` gives them (unset or empty keeps
    /// the default):
    ///
    /// - `DAYTONA_API_KEY`, or `DAYTONA_JWT_TOKEN` with `DAYTONA_ORGANIZATION_ID` (required);
    /// - `DAYTONA_API_URL` (default [`DEFAULT_API_URL`]; the deprecated `DAYTONA_SERVER_URL` too);
    /// - `DAYTONA_TARGET` (region for a created sandbox);
    /// - `DAYTONA_SNAPSHOT` (the snapshot new sandboxes start from, unless the spec names one);
    /// - `EXECSEAM_DAYTONA_TEMP_DIR` (where stdin files and output FIFOs go, default `/tmp`);
    /// - `EXECSEAM_DAYTONA_TERMINAL` (`recorder`, `auto`, `attached`: [`DaytonaConfig::terminal`]);
    /// - `EXECSEAM_DAYTONA_SIGNED_PREVIEWS` (seconds: [`DaytonaConfig::signed_previews`]).
    ///
    /// A missing credential is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<DaytonaConfig, Error> {
        let var = |k: &str| vars.text(k);
        let (token, org) = match (var("DAYTONA_API_KEY"), var("DAYTONA_JWT_TOKEN")) {
            (Some(key), _) => (key, var("DAYTONA_ORGANIZATION_ID")),
            (None, Some(jwt)) => {
                let org = var("DAYTONA_ORGANIZATION_ID").ok_or_else(|| {
                    vars::config_error(
                        crate::PROVIDER,
                        "DAYTONA_ORGANIZATION_ID is required with DAYTONA_JWT_TOKEN",
                    )
                })?;
                (jwt, Some(org))
            }
            (None, None) => {
                return Err(vars::config_error(
                    crate::PROVIDER,
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
        c.snapshot = var("DAYTONA_SNAPSHOT");
        if let Some(dir) = var("EXECSEAM_DAYTONA_TEMP_DIR") {
            c = c.temp_dir(dir);
        }
        c.toolbox_url = var("EXECSEAM_DAYTONA_TOOLBOX_URL");
        if let Some(mode) = TerminalMode::from_vars(vars, "EXECSEAM_DAYTONA_TERMINAL")? {
            c.terminal = mode;
        }
        c.signed_previews = vars.seconds("EXECSEAM_DAYTONA_SIGNED_PREVIEWS")?;
        c.validate()?;
        Ok(c)
    }

    /// Checks what can be wrong before any I/O.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if !self.temp_dir.starts_with('/') || self.temp_dir.contains(['\0', '\'']) {
            return Err(vars::config_error(
                crate::PROVIDER,
                "the temp dir must be an absolute path without quotes",
            ));
        }
        if let Some(t) = self.signed_previews
            && !(1..=86_400).contains(&t.as_secs())
        {
            return Err(vars::config_error(
                crate::PROVIDER,
                "signed previews last 1 second to 24 hours (expiresInSeconds)",
            ));
        }
        // Parsed whole here, so no request can fail on the URL later.
        vars::parse_url(
            crate::PROVIDER,
            "the API URL",
            &self.api_url,
            &["http", "https"],
        )?;
        Ok(())
    }

    execseam_adapter_kit::setters! {
        /// The control-plane base URL (`…/api`).
        api_url: into String,
        /// Sends `X-Daytona-Organization-ID` (needed with a JWT).
        organization_id: some into String,
        /// The region for created sandboxes.
        target: some into String,
        /// The snapshot new sandboxes start from when the spec names none (default: the
        /// organization's).
        snapshot: some into String,
        /// The directory in the sandbox for stdin files and the output FIFOs (absolute; default
        /// `/tmp`).
        temp_dir: into String,
        /// The timeout of each control or files request. The request that runs a command has none:
        /// commands take as long as they take (use a host deadline layer).
        request_timeout: Duration,
        /// The TCP/TLS connect timeout.
        connect_timeout: Duration,
        /// The longest silence on a command's log stream before the adapter asks Daytona, with
        /// one status request, whether the command ended (default 30 s). A command that is still
        /// running keeps its stream; one that ended while its stream stalled is finished from the
        /// log's REST route. A silent command is never failed for its silence.
        idle_timeout: Duration,
        /// The most output [`Exec::exec`](execseam_core::Exec::exec) collects per stream (default
        /// 64 MiB); beyond it the exec fails with `OutputLimit`. Streams are not limited.
        max_output: u64,
        /// The most of any answer read that is not a command's log (default
        /// [`DEFAULT_MAX_ANSWER_BYTES`]): sandboxes, sessions, command states, listings, downloaded
        /// files, and each message of the log stream. A larger (or endless) answer fails with
        /// `OutputLimit` (`Retry::Never` before the command is submitted, `Unsafe` after) instead of
        /// being collected whole. The log answers are bounded by [`max_output`](Self::max_output).
        max_answer_bytes: usize => .max(1024),
        /// Which route runs [`Exec::exec`](execseam_core::Exec::exec) (default
        /// [`ExecRoute::Execute`]).
        exec_route: ExecRoute,
        /// Where terminals run (default [`TerminalMode::Recorder`]: `script(1)`, which Daytona's
        /// default snapshot has, so a terminal is reattached and typed into from any handle or
        /// process); [`TerminalMode::Attached`] for the daemon's own PTY sessions (held by the
        /// handle that started them: the daemon keeps no scrollback), [`TerminalMode::Auto`] for the
        /// recorder where the image has `script` and a PTY session elsewhere.
        terminal: TerminalMode,
        /// The toolbox proxy (`toolboxProxyUrl`, `https://proxy.app.daytona.io/toolbox` on Daytona
        /// Cloud) for sandboxes attached by id ([`DaytonaProvider::attach`](crate::DaytonaProvider::attach));
        /// unset, it is asked of the API on first use. Created and connected sandboxes use the one
        /// their DTO names.
        toolbox_url: some into String,
        /// How many idle sessions a sandbox handle keeps for reuse (default
        /// [`DEFAULT_SESSION_POOL`]), for streams and [`ExecRoute::Session`]. An exec takes a free session (one request: the synchronous
        /// session exec) and creates one only when all are busy; a session whose command did not
        /// end cleanly (cancelled, timed out, dropped, failed after the submit) is deleted instead
        /// of reused, and the pool's sessions are deleted by `close`/`destroy`. `0` gives every exec
        /// a fresh session, deleted after it (three requests per exec, and a background child
        /// ends with its command).
        session_pool: usize,
        /// `expose` answers a signed preview URL (`GET /sandbox/{id}/ports/{port}/signed-preview-url`)
        /// that works for `expires` (1 s to 24 h, whole seconds) with its token in the URL itself,
        /// instead of the preview link whose every request carries `X-Daytona-Preview-Token`: for a
        /// browser or another service that cannot send headers. Each call makes a new URL.
        signed_previews: some Duration,
        /// How long create and connect wait for a sandbox to reach `started`.
        start_timeout: Duration,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_token() {
        let c = DaytonaConfig::new("dtn_secret_value").organization_id("org");
        let s = format!("{c:?} {c:#?}");
        assert!(!s.contains("dtn_secret_value"), "{s}");
        assert!(s.contains("REDACTED"), "{s}");
    }

    #[test]
    fn temp_dir_must_be_absolute() {
        assert!(DaytonaConfig::new("k").temp_dir("tmp").validate().is_err());
        assert!(
            DaytonaConfig::new("k")
                .temp_dir("/var/tmp")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn a_missing_credential_is_invalid_config() {
        let e = crate::Daytona::config_from(&|_| None).unwrap_err();
        assert_eq!(e.kind(), execseam_core::ErrorKind::InvalidConfig);
    }
}
