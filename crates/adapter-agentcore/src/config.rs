//! Configuration: region, credentials, endpoint, code interpreter, session and exec mode.
//!
//! [`AgentCoreConfig::from_env`] reads the standard AWS variables itself (no `aws-config`, so no
//! profile files, SSO, IMDS or web identity); any other credential source can be plugged in with
//! [`AgentCoreConfig::credentials_provider`].

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use std::fmt;
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use execseam_core::Error;
#[cfg(test)]
use execseam_core::ErrorKind;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The built-in code interpreter (`bedrock_agentcore`'s `DEFAULT_IDENTIFIER`).
pub const DEFAULT_IDENTIFIER: &str = "aws.codeinterpreter.v1";
/// The session working directory of the AWS-managed code interpreter, where relative paths of the
/// files tools land.
pub const DEFAULT_SESSION_ROOT: &str = "/opt/amazon/genesis1p-tools/var";
/// The session lifetime asked for when the adapter starts a session (the service default).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(900);

/// How a command is run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// One `InvokeCodeInterpreter` call with the `executeCommand` tool: the result carries the exit
    /// code and both streams. Dropping the exec cannot stop the command (no handle exists), so
    /// `remote_kill` is false. The default: one round trip per command.
    #[default]
    Command,
    /// `startCommandExecution`, then `getTask` until the task ends; dropping the exec (a host
    /// deadline, a cancel) sends `stopTask`. `remote_kill` is true; costs at least one more round
    /// trip per command, and a command is not bound by the per-invocation time limit.
    Task,
}

impl ExecMode {
    fn parse(s: &str) -> Option<ExecMode> {
        match s {
            "command" | "executeCommand" => Some(ExecMode::Command),
            "task" | "startCommandExecution" => Some(ExecMode::Task),
            _ => None,
        }
    }
}

/// Static credentials (the secret and the session token never reach `Debug`).
#[derive(Clone)]
pub(crate) struct StaticKeys {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: SecretString,
    pub(crate) session_token: Option<SecretString>,
}

#[derive(Clone)]
pub(crate) enum CredentialSource {
    Static(StaticKeys),
    Provider(SharedCredentialsProvider),
}

impl fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::Static(k) => write!(
                f,
                "static(access key {}, secret <redacted>{})",
                k.access_key_id,
                if k.session_token.is_some() {
                    ", session token <redacted>"
                } else {
                    ""
                }
            ),
            CredentialSource::Provider(_) => f.write_str("provider"),
        }
    }
}

impl CredentialSource {
    pub(crate) fn provider(&self) -> SharedCredentialsProvider {
        match self {
            CredentialSource::Static(k) => SharedCredentialsProvider::new(Credentials::new(
                k.access_key_id.clone(),
                k.secret_access_key.expose_secret().to_owned(),
                k.session_token
                    .as_ref()
                    .map(|t| t.expose_secret().to_owned()),
                None,
                "execseam",
            )),
            CredentialSource::Provider(p) => p.clone(),
        }
    }
}

/// Configuration of [`AgentCoreExec`](crate::AgentCoreExec). `Debug` shows the access key id,
/// never the secret or the session token.
#[derive(Clone, Debug)]
pub struct AgentCoreConfig {
    pub(crate) region: String,
    pub(crate) endpoint_url: Option<String>,
    pub(crate) credentials: CredentialSource,
    pub(crate) identifier: String,
    pub(crate) session_name: Option<String>,
    pub(crate) session_timeout: Duration,
    pub(crate) mode: ExecMode,
    pub(crate) exact_output: bool,
    pub(crate) legacy_framing: bool,
    pub(crate) session_root: String,
    pub(crate) temp_dir: String,
    pub(crate) poll_max: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

fn missing_credentials(message: &str) -> Error {
    vars::config_error(PROVIDER, message)
}

impl AgentCoreConfig {
    /// A configuration with static keys; everything else takes its default (the built-in code
    /// interpreter, a new session per adapter, [`ExecMode::Command`], exact output).
    pub fn new(
        region: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> AgentCoreConfig {
        AgentCoreConfig {
            region: region.into(),
            endpoint_url: None,
            credentials: CredentialSource::Static(StaticKeys {
                access_key_id: access_key_id.into(),
                secret_access_key: SecretString::from(secret_access_key.into()),
                session_token: None,
            }),
            identifier: DEFAULT_IDENTIFIER.to_owned(),
            session_name: None,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            mode: ExecMode::Command,
            exact_output: true,
            legacy_framing: false,
            session_root: DEFAULT_SESSION_ROOT.to_owned(),
            temp_dir: "/tmp".to_owned(),
            poll_max: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
        }
    }

    /// Reads the variables in [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<AgentCoreConfig, Error> {
        crate::AgentCore::config_from(&vars::env)
    }

    /// Reads the environment:
    ///
    /// - `AWS_REGION` (or `AWS_DEFAULT_REGION`): required.
    /// - `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`: required; `AWS_SESSION_TOKEN`: optional.
    /// - `AWS_ENDPOINT_URL_BEDROCK_AGENTCORE` (or `AWS_ENDPOINT_URL`): an endpoint override, as
    ///   the AWS SDKs read it (the emulator sets it).
    /// - `AGENTCORE_CODE_INTERPRETER_ID`: default `aws.codeinterpreter.v1`.
    /// - `AGENTCORE_SESSION_TIMEOUT_SECONDS`: the lifetime of a started session (default 900).
    /// - `AGENTCORE_EXEC_MODE`: `command` (default) or `task`.
    /// - `AGENTCORE_EXACT_OUTPUT`: `1` (default) or `0`; see the crate docs.
    /// - `AGENTCORE_SESSION_ROOT`: the session working directory (default
    ///   `/opt/amazon/genesis1p-tools/var`).
    ///
    /// Each is read as `vars` gives it (unset or empty keeps the default); a missing or malformed
    /// one is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<AgentCoreConfig, Error> {
        let region = vars
            .text("AWS_REGION")
            .or_else(|| vars.text("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                vars::config_error(PROVIDER, "AWS_REGION (or AWS_DEFAULT_REGION) is not set")
            })?;
        let key = vars.text("AWS_ACCESS_KEY_ID").ok_or_else(|| {
            missing_credentials(
                "AWS_ACCESS_KEY_ID is not set (this adapter reads static keys from the environment; \
                 plug any other source in with AgentCoreConfig::credentials_provider)",
            )
        })?;
        let secret = vars
            .text("AWS_SECRET_ACCESS_KEY")
            .ok_or_else(|| missing_credentials("AWS_SECRET_ACCESS_KEY is not set"))?;
        let mut c = AgentCoreConfig::new(region, key, secret);
        if let Some(token) = vars.text("AWS_SESSION_TOKEN") {
            c = c.session_token(token);
        }
        if let Some(url) = vars
            .text("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE")
            .or_else(|| vars.text("AWS_ENDPOINT_URL"))
        {
            c = c.endpoint_url(url);
        }
        if let Some(id) = vars.text("AGENTCORE_CODE_INTERPRETER_ID") {
            c = c.code_interpreter(id);
        }
        if let Some(t) = vars.text("AGENTCORE_SESSION_TIMEOUT_SECONDS") {
            let secs: u64 = t.parse().map_err(|_| {
                vars::config_error(
                    PROVIDER,
                    format!("AGENTCORE_SESSION_TIMEOUT_SECONDS={t:?} is not a number"),
                )
            })?;
            c = c.session_timeout(Duration::from_secs(secs));
        }
        if let Some(m) = vars.text("AGENTCORE_EXEC_MODE") {
            let mode = ExecMode::parse(&m).ok_or_else(|| {
                vars::config_error(
                    PROVIDER,
                    format!("AGENTCORE_EXEC_MODE={m:?}: want `command` or `task`"),
                )
            })?;
            c = c.mode(mode);
        }
        if let Some(x) = vars.text("AGENTCORE_EXACT_OUTPUT") {
            c = c.exact_output(match x.as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(vars::config_error(
                        PROVIDER,
                        format!("AGENTCORE_EXACT_OUTPUT={x:?}: want 1 or 0"),
                    ));
                }
            });
        }
        if let Some(root) = vars.text("AGENTCORE_SESSION_ROOT") {
            c = c.session_root(root);
        }
        c.validate()?;
        Ok(c)
    }

    /// A session token for temporary credentials (static keys only).
    #[must_use]
    pub fn session_token(mut self, token: impl Into<String>) -> Self {
        if let CredentialSource::Static(k) = &mut self.credentials {
            k.session_token = Some(SecretString::from(token.into()));
        }
        self
    }

    /// Any credentials provider (for example one built with `aws-config`), instead of static keys.
    #[must_use]
    pub fn credentials_provider(mut self, provider: SharedCredentialsProvider) -> Self {
        self.credentials = CredentialSource::Provider(provider);
        self
    }

    execseam_adapter_kit::setters! {
        /// The base URL of the data plane (`scheme://host:port`), instead of the regional endpoint.
        endpoint_url: some into String,
    }

    /// The code interpreter identifier (default `aws.codeinterpreter.v1`).
    #[must_use]
    pub fn code_interpreter(mut self, identifier: impl Into<String>) -> Self {
        self.identifier = identifier.into();
        self
    }

    execseam_adapter_kit::setters! {
        /// The name given to a started session (default `execseam-<random>`).
        session_name: some into String,
        /// The lifetime asked for a started session (1 s ..= 8 h; default 900 s).
        session_timeout: Duration,
        /// How commands are run (default [`ExecMode::Command`]).
        mode: ExecMode,
        /// Whether output is carried base64-framed on stdout so it arrives byte-exact (default
        /// true); see the crate docs.
        exact_output: bool,
    }

    /// The exact-output frame of the adapter before issue 22 (every stream base64-encoded by
    /// `base64`, in a subshell, after `/bin/sh -c`): kept only so that the benchmark can
    /// measure the old framing against the new one in the same run. Not part of the API.
    #[doc(hidden)]
    #[must_use]
    pub fn legacy_framing(mut self, on: bool) -> Self {
        self.legacy_framing = on;
        self
    }

    execseam_adapter_kit::setters! {
        /// The session working directory, where relative file paths land (default
        /// `/opt/amazon/genesis1p-tools/var`).
        session_root: into String,
        /// The directory for the exact-output capture files (default `/tmp`).
        temp_dir: into String,
        /// The longest pause between two `getTask` polls in [`ExecMode::Task`] (default 500 ms; the
        /// first polls come sooner).
        poll_max: Duration,
        /// The TCP/TLS connect timeout (default 10 s).
        connect_timeout: Duration,
        /// The longest wait for an answer's head and then for each event of its stream (default
        /// 10 min; a command silent for longer fails with `Timeout(Request)`), and the timeout of
        /// each session call.
        idle_timeout: Duration,
    }

    /// The exec mode.
    pub fn exec_mode(&self) -> ExecMode {
        self.mode
    }

    /// Whether exact output is on.
    pub fn is_exact_output(&self) -> bool {
        self.exact_output
    }

    /// The session working directory.
    pub fn session_root_dir(&self) -> &str {
        &self.session_root
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.region.is_empty() {
            return Err(vars::config_error(PROVIDER, "the region is empty"));
        }
        if self.identifier.is_empty() {
            return Err(vars::config_error(
                PROVIDER,
                "the code interpreter identifier is empty",
            ));
        }
        let secs = self.session_timeout.as_secs();
        if !(1..=28_800).contains(&secs) {
            return Err(vars::config_error(
                PROVIDER,
                format!("session timeout {secs} s is outside 1..=28800"),
            ));
        }
        for (what, dir) in [
            ("session root", &self.session_root),
            ("temp dir", &self.temp_dir),
        ] {
            if !dir.starts_with('/') || dir.contains('\0') {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("the {what} {dir:?} is not absolute"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_secret_and_the_token() {
        let c = AgentCoreConfig::new("us-east-1", "AKIDEXAMPLE", "wJalrXUtnFEMI-secret")
            .session_token("FwoGZX-token");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("wJalrXUtnFEMI-secret"), "{dbg}");
        assert!(!dbg.contains("FwoGZX-token"), "{dbg}");
        assert!(dbg.contains("AKIDEXAMPLE"), "{dbg}");
        assert!(dbg.contains("<redacted>"), "{dbg}");
    }

    #[test]
    fn validation_rejects_bad_values_before_any_io() {
        let ok = AgentCoreConfig::new("us-east-1", "a", "b");
        assert!(ok.validate().is_ok());
        for bad in [
            ok.clone().session_timeout(Duration::from_secs(0)),
            ok.clone().session_timeout(Duration::from_secs(28_801)),
            ok.clone().session_root("relative"),
            ok.clone().code_interpreter(""),
        ] {
            let e = bad.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        }
    }

    #[test]
    fn exec_modes_parse() {
        assert_eq!(ExecMode::parse("task"), Some(ExecMode::Task));
        assert_eq!(ExecMode::parse("command"), Some(ExecMode::Command));
        assert_eq!(ExecMode::parse("nope"), None);
    }
}
