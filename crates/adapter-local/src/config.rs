//! [`LocalConfig`]: what every command's environment starts from, and an optional launcher.

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use execseam_core::Error;

use crate::exec::Spawner;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Configuration of [`LocalExec`](crate::LocalExec); the defaults suit running commands on this host.
#[derive(Clone)]
pub struct LocalConfig {
    pub(crate) inherit: Vec<String>,
    base_env: BTreeMap<String, String>,
    pub(crate) launcher: Vec<String>,
    pub(crate) spawner: Option<Arc<dyn Spawner>>,
    pub(crate) drain_timeout: Duration,
    pub(crate) sandbox_root: PathBuf,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            inherit: ["PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR"]
                .map(String::from)
                .to_vec(),
            base_env: BTreeMap::new(),
            launcher: Vec::new(),
            spawner: None,
            drain_timeout: Duration::from_secs(1),
            sandbox_root: std::env::temp_dir().join("execseam-local"),
        }
    }
}

impl std::fmt::Debug for LocalConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalConfig")
            .field("inherit", &self.inherit)
            .field("base_env", &self.base_env.keys().collect::<Vec<_>>())
            .field("launcher", &self.launcher)
            .field("spawner", &self.spawner.as_ref().map(|_| "set"))
            .field("drain_timeout", &self.drain_timeout)
            .field("sandbox_root", &self.sandbox_root)
            .finish()
    }
}

impl LocalConfig {
    /// The defaults.
    pub fn new() -> LocalConfig {
        LocalConfig::default()
    }

    /// The defaults, then the variables in [`VARS`](crate::VARS) from this process's environment.
    pub fn from_env() -> Result<LocalConfig, Error> {
        crate::Local::config_from(&vars::env)
    }

    /// The defaults, then the variables in [`VARS`](crate::VARS) as `vars` gives them (an unset or empty
    /// variable keeps the default): `EXECSEAM_LOCAL_SANDBOX_ROOT`, the directory sandboxes are
    /// created in (absolute).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<LocalConfig, Error> {
        let mut c = LocalConfig::new();
        if let Some(root) = vars.text("EXECSEAM_LOCAL_SANDBOX_ROOT") {
            c = c.sandbox_root(root);
        }
        Ok(c)
    }

    /// The directory [`LocalProvider`](crate::LocalProvider) creates sandboxes in (default
    /// `$TMPDIR/execseam-local`); it must be absolute.
    #[must_use]
    pub fn sandbox_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sandbox_root = dir.into();
        self
    }

    /// The directory sandboxes are created in.
    pub fn sandbox_root_dir(&self) -> &std::path::Path {
        &self.sandbox_root
    }

    /// The host variables copied into every command's environment (replaces the default list).
    #[must_use]
    pub fn inherit<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.inherit = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Variables set in every command's environment, after the inherited ones.
    #[must_use]
    pub fn base_env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.base_env = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// An argv prefix every command runs under (for example `unshare --mount … --`); the command
    /// itself becomes `/bin/sh -c <wrapper>` so its workdir is entered inside the launcher.
    #[must_use]
    pub fn launcher<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.launcher = argv.into_iter().map(Into::into).collect();
        self
    }

    /// The argv prefix set by [`launcher`](Self::launcher) (empty when commands run directly):
    /// for emulators that spawn processes themselves (interactive stdin, signals) in the same
    /// sandbox view.
    pub fn launcher_argv(&self) -> &[String] {
        &self.launcher
    }

    /// Starts every command through `spawner` (an emulator's sandbox) instead of on this host;
    /// the workdir is then checked and entered by the spawner, natively.
    #[must_use]
    pub fn spawner(mut self, spawner: Arc<dyn Spawner>) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// How long to keep reading a command's pipes after it exited (default 1 s).
    #[must_use]
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// The environment a command with an empty [`Command::env`] starts with.
    pub fn environment(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for key in &self.inherit {
            if let Some(v) = std::env::var_os(key).and_then(|v| v.into_string().ok()) {
                env.insert(key.clone(), v);
            }
        }
        env.entry("PATH".to_owned())
            .or_insert_with(|| DEFAULT_PATH.to_owned());
        env.extend(self.base_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }
}
