//! [`LocalConfig`]: what every command's environment starts from, and an optional launcher.

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use execseam_core::Error;

use execseam_spawn::{ProcessConfig, Spawner};

/// Configuration of [`LocalExec`](crate::LocalExec); the defaults suit running commands on this host.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// How commands run (the environment they start from, a launcher or spawner, the drain).
    pub(crate) process: ProcessConfig,
    pub(crate) sandbox_root: PathBuf,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            process: ProcessConfig::default(),
            sandbox_root: std::env::temp_dir().join("execseam-local"),
        }
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

    execseam_adapter_kit::setters! {
        /// The directory [`LocalProvider`](crate::LocalProvider) creates sandboxes in (default
        /// `$TMPDIR/execseam-local`); it must be absolute.
        sandbox_root: into PathBuf,
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
        self.process = self.process.inherit(keys);
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
        self.process = self.process.base_env(vars);
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
        self.process = self.process.launcher(argv);
        self
    }

    /// The argv prefix set by [`launcher`](Self::launcher) (empty when commands run directly):
    /// for emulators that spawn processes themselves (interactive stdin, signals) in the same
    /// sandbox view.
    pub fn launcher_argv(&self) -> &[String] {
        self.process.launcher_argv()
    }

    /// Starts every command through `spawner` (an emulator's sandbox) instead of on this host;
    /// the workdir is then checked and entered by the spawner, natively.
    #[must_use]
    pub fn spawner(mut self, spawner: Arc<dyn Spawner>) -> Self {
        self.process = self.process.spawner(spawner);
        self
    }

    /// How long to keep reading a command's pipes after it exited (default 1 s).
    #[must_use]
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.process = self.process.drain_timeout(timeout);
        self
    }

    /// The environment a command with an empty command env starts with.
    pub fn environment(&self) -> BTreeMap<String, String> {
        self.process.environment()
    }
}
