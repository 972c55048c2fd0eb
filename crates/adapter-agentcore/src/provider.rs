//! [`AgentCoreProvider`]: Code Interpreter sessions as sandboxes.

use execseam_adapter_kit::Checks as _;
use execseam_adapter_kit::gone_is_destroyed;
use execseam_core::{
    Error, ErrorKind, ListFilter, Ownership, Provider, SandboxInfo, SandboxSpec, SandboxState,
};

use crate::client::Client;
use crate::config::AgentCoreConfig;
use crate::exec::{AgentCoreExec, capabilities_for};
use crate::{LIFECYCLE, PROVIDER};

/// Starts, finds, lists and stops Code Interpreter sessions. Built without I/O.
///
/// | operation | AgentCore call |
/// |---|---|
/// | [`create`](Self::create) | `StartCodeInterpreterSession` (lifetime → `sessionTimeoutSeconds`, else the configured one; the `name` option names it) |
/// | [`connect`](Self::connect) | `GetCodeInterpreterSession`: a `READY` session; anything else is `NotFound` |
/// | [`list`](Self::list) | `ListCodeInterpreterSessions` with status `READY`, every page |
/// | [`destroy`](Self::destroy) | `StopCodeInterpreterSession`; a session already gone is `Ok` |
#[derive(Clone, Debug)]
pub struct AgentCoreProvider {
    config: AgentCoreConfig,
    client: Client,
}

impl AgentCoreProvider {
    /// A provider with this configuration; what can be wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: AgentCoreConfig) -> Result<AgentCoreProvider, Error> {
        config.validate()?;
        let client = Client::new(&config);
        Ok(AgentCoreProvider { config, client })
    }

    execseam_adapter_kit::provider_config!(self => AgentCoreConfig: &self.config);

    /// Starts a session; the handle owns it (close stops it).
    pub async fn create(&self, spec: SandboxSpec) -> Result<AgentCoreExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let timeout = spec.lifetime().unwrap_or(self.config.session_timeout);
        if !(1..=28_800).contains(&timeout.as_secs()) {
            return Err(Error::invalid_config(format!(
                "a session lifetime of {} s is outside 1..=28800",
                timeout.as_secs()
            ))
            .with_provider(PROVIDER)
            .with_operation("create"));
        }
        let mut config = self.config.clone();
        if let Some(name) = spec.options().get("name") {
            config = config.session_name(name.clone());
        }
        AgentCoreExec::start(self.client.clone(), config, timeout).await
    }

    /// Attaches to the `READY` session `id`; not owned.
    pub async fn connect(&self, id: &str) -> Result<AgentCoreExec, Error> {
        let missing = |why: String| {
            Error::new(ErrorKind::NotFound, why)
                .with_provider(PROVIDER)
                .with_operation("connect")
        };
        if id.is_empty() || id.len() > 40 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(missing(format!(
                "session id {id:?} does not match [0-9a-zA-Z]{{1,40}}"
            )));
        }
        let status = self.client.session_status(id).await?;
        if status != "READY" {
            return Err(missing(format!("session {id} is {status}, not READY")));
        }
        self.attach(id)
    }

    /// A handle on session `id` without a request; not owned.
    pub fn attach(&self, id: &str) -> Result<AgentCoreExec, Error> {
        Ok(AgentCoreExec::attach(
            self.client.clone(),
            self.config.clone(),
            id.to_owned(),
            Ownership::connected(),
        ))
    }

    /// Lists the `READY` sessions (sessions have no labels: a filter with labels is
    /// `Unsupported`).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let sessions = self.client.list_sessions().await?;
        Ok(sessions
            .into_iter()
            .map(|(id, name)| {
                SandboxInfo::new(id)
                    .with_name(name)
                    .with_state(SandboxState::Running)
            })
            .collect())
    }

    /// Stops session `id`; one that is already gone is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        gone_is_destroyed(self.client.stop_session(id).await)
    }
}

impl Provider for AgentCoreProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: capabilities_for(self.config.exec_mode(), self.config.is_exact_output()),
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(AgentCoreProvider: create, connect, attach, list, destroy);
}
