//! [`LocalExec`]: runs each command on this host (through `execseam-spawn`'s process runner), in
//! a sandbox directory or on the host itself.

use std::sync::Arc;

use execseam_adapter_kit::exec_span;
use execseam_core::{
    BoxFuture, Capabilities, Command, Error, ErrorKind, EventStream, Exec, ExecStream, Output,
    Ownership, Sandbox,
};
use execseam_spawn::ProcessExec;

use crate::PROVIDER;
use crate::config::LocalConfig;
use crate::error::error;

/// Runs commands on this host. See the [crate docs](crate).
///
/// [`LocalExec::new`] runs them on the host itself (the embedded default; its [`Sandbox::id`] is
/// `host` and it cannot be destroyed). A handle from [`LocalProvider`](crate::LocalProvider) runs
/// them in a sandbox directory.
#[derive(Clone, Debug)]
pub struct LocalExec {
    config: Arc<LocalConfig>,
    process: ProcessExec,
    sandbox: Option<Arc<SandboxDir>>,
    /// The sandbox's ownership, or (on the host) one that is never owned.
    ownership: Ownership,
}

/// A local sandbox: a directory, its env, and who removes it.
#[derive(Debug)]
pub(crate) struct SandboxDir {
    pub(crate) id: String,
    pub(crate) dir: std::path::PathBuf,
    /// `<dir>/work`, the default workdir.
    pub(crate) work: String,
    pub(crate) env: std::collections::BTreeMap<String, String>,
    pub(crate) ownership: Ownership,
}

impl Drop for SandboxDir {
    fn drop(&mut self) {
        // The safety net: an owned sandbox nobody closed is removed with its last handle.
        if self.ownership.destroy_on_drop() {
            let _ = std::fs::remove_dir_all(&self.dir);
            tracing::debug!(provider = PROVIDER, sandbox = %self.id, "removed on drop");
        }
    }
}

/// The id of the host handle ([`LocalExec::new`]).
const HOST_ID: &str = "host";

impl LocalExec {
    /// An adapter with the default configuration, on the host.
    pub fn new() -> LocalExec {
        LocalExec::with_config(LocalConfig::default())
    }

    /// An adapter with this configuration, on the host.
    pub fn with_config(config: LocalConfig) -> LocalExec {
        LocalExec {
            process: ProcessExec::new(config.process.clone(), PROVIDER),
            config: Arc::new(config),
            sandbox: None,
            ownership: Ownership::connected(),
        }
    }

    pub(crate) fn in_sandbox(config: Arc<LocalConfig>, sandbox: SandboxDir) -> LocalExec {
        LocalExec {
            process: ProcessExec::new(config.process.clone(), PROVIDER),
            config,
            ownership: sandbox.ownership.clone(),
            sandbox: Some(Arc::new(sandbox)),
        }
    }

    /// The sandbox's working directory (`None` on the host).
    pub fn workdir(&self) -> Option<&str> {
        self.sandbox.as_deref().map(|s| s.work.as_str())
    }

    /// Puts `cmd` in the sandbox: its workdir by default, the sandbox env under the command's.
    /// A destroyed sandbox is `NotFound`.
    async fn place(&self, cmd: Command) -> Result<Command, Error> {
        let Some(sbx) = self.sandbox.as_deref() else {
            return Ok(cmd);
        };
        if !tokio::fs::metadata(&sbx.work)
            .await
            .is_ok_and(|m| m.is_dir())
        {
            return Err(error(
                ErrorKind::NotFound,
                format!("sandbox {} does not exist (it was destroyed)", sbx.id),
            ));
        }
        if cmd.workdir().is_some() && sbx.env.is_empty() {
            return Ok(cmd);
        }
        let mut env = sbx.env.clone();
        env.extend(cmd.env().iter().map(|(k, v)| (k.clone(), v.clone())));
        let workdir = cmd.workdir().unwrap_or(&sbx.work).to_owned();
        cmd.into_builder()
            .clear_env()
            .envs(env)
            .workdir(workdir)
            .build()
    }

    /// The configuration.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// The capabilities this adapter reports.
    pub fn capabilities_of(config: &LocalConfig) -> Capabilities {
        Capabilities {
            processes: crate::CAPABILITIES.processes,
            ..config.process.capabilities()
        }
    }

    /// Checks `command`'s size (before anything else, as an `execve` would refuse it) and puts
    /// it in the sandbox.
    async fn prepare(&self, command: Command) -> Result<Command, Error> {
        execseam_adapter_kit::size::check_size(PROVIDER, &command, &crate::size_limit())?;
        self.place(command).await
    }
}

impl Default for LocalExec {
    fn default() -> Self {
        LocalExec::new()
    }
}

impl Exec for LocalExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: LocalExec::capabilities_of(&self.config),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
            let command = self.prepare(command).await?;
            self.process.run(command).await
        })
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }

    /// The adapter kit's spool, on this host: a sandbox's spools are in its directory
    /// (`<sandbox>/processes`), the host's in `<temp dir>/execseam-processes-<uid>`; with a
    /// launcher, where the launched commands see `/tmp`. A started command outlives the
    /// `execseam` process that started it (its supervisor is in a session of its own).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        let root = match (
            &self.sandbox,
            self.config.process.launcher_argv().is_empty(),
        ) {
            (Some(s), true) => s.dir.join("processes").to_string_lossy().into_owned(),
            (None, true) => {
                // This process's uid: the owner of its own /proc entry.
                let uid =
                    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?);
                std::env::temp_dir()
                    .join(format!("execseam-processes-{uid}"))
                    .to_string_lossy()
                    .into_owned()
            }
            (_, false) => execseam_adapter_kit::spool::DEFAULT_ROOT.to_owned(),
        };
        Some(Box::new(
            execseam_adapter_kit::spool::Spool::new(self, Sandbox::id(self)).root(root),
        ))
    }
}

execseam_adapter_kit::exec_stream_by!(LocalExec: open_stream);

impl LocalExec {
    /// The stream of `command`, run in the sandbox's directory.
    async fn open_stream(&self, command: Command) -> Result<EventStream, Error> {
        tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec_stream");
        let command = self.prepare(command).await?;
        self.process.run_stream(command).await
    }
}

impl Sandbox for LocalExec {
    execseam_adapter_kit::accessors!(
        self => id: self.sandbox.as_deref().map_or(HOST_ID, |s| s.id.as_str()),
        ownership: &self.ownership,
    );

    /// Removes the sandbox directory; the host is not a sandbox and cannot be destroyed.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let Some(s) = self.sandbox.as_deref() else {
                return Err(Error::unsupported(
                    "the host is not a sandbox: it cannot be destroyed",
                )
                .with_provider(PROVIDER)
                .with_operation("destroy"));
            };
            crate::provider::remove(&s.dir).await?;
            tracing::debug!(provider = PROVIDER, sandbox = %s.id, "destroyed");
            Ok(())
        })
    }
}
