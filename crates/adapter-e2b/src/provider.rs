//! [`E2bProvider`]: the control plane's sandbox lifecycle.

use execseam_adapter_kit::Checks as _;
use execseam_core::{
    BoxFuture, Capabilities, Error, ExposedPort, ListFilter, Provider, Sandbox, SandboxInfo,
    SandboxSpec, SandboxState,
};

use reqwest::Url;

use crate::client::{ControlPlane, NewSandbox};
use crate::config::E2bConfig;
use crate::error::{self, Ctx};
use crate::exec::{Attach, E2bExec, EnvdVersion, new_http};
use crate::{LIFECYCLE, PROVIDER};
use execseam_adapter_kit::retry::Stage;

/// Creates, connects to, lists and destroys E2B sandboxes. Built without I/O; cheap to clone
/// (one connection pool).
///
/// | operation | E2B call | notes |
/// |---|---|---|
/// | [`create`](Self::create) | `POST /v2/sandboxes` | image → `templateID`, env → `envVars`, labels → `metadata`, lifetime → `timeout` (seconds) |
/// | [`connect`](Self::connect) | `POST /v2/sandboxes/{id}/connect` | resumes a paused sandbox; sets its lifetime to [`E2bConfig::sandbox_timeout`] |
/// | [`list`](Self::list) | `GET /v2/sandboxes?metadata=…&state=running,paused` | every page (`X-Next-Token`) |
/// | [`destroy`](Self::destroy) | `DELETE /sandboxes/{id}` | a 404 (already gone) is `Ok` |
#[derive(Clone, Debug)]
pub struct E2bProvider {
    pub(crate) config: E2bConfig,
    pub(crate) http: reqwest::Client,
    /// The control plane's base URL, parsed once.
    pub(crate) api: Url,
}

impl E2bProvider {
    /// A provider with this configuration; a bad URL or an empty key is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: E2bConfig) -> Result<E2bProvider, Error> {
        config.validate()?;
        let http = new_http(&config)?;
        let api = config.api_base()?;
        Ok(E2bProvider { config, http, api })
    }

    execseam_adapter_kit::provider_config!(self => E2bConfig: &self.config);

    pub(crate) fn control(&self) -> Result<ControlPlane<'_>, Error> {
        Ok(ControlPlane {
            http: &self.http,
            base: self.api.clone(),
            config: &self.config,
        })
    }

    /// Creates a sandbox; the handle owns it (close kills it).
    pub async fn create(&self, spec: SandboxSpec) -> Result<E2bExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let c = &self.config;
        let mut metadata = c.metadata.clone();
        metadata.extend(spec.labels().clone());
        let mut env = c.sandbox_env.exposed();
        env.extend(spec.env().clone());
        let new = NewSandbox {
            // A snapshot is a template (`crate::state`).
            template: spec
                .snapshot()
                .or(spec.image())
                .unwrap_or(&c.template)
                .to_owned(),
            timeout: spec.lifetime().unwrap_or(c.sandbox_timeout),
            metadata,
            env,
        };
        E2bExec::create(
            self.config.clone(),
            self.http.clone(),
            self.api.clone(),
            &new,
        )
        .await
    }

    /// Connects to a running or paused sandbox; the handle does not own it.
    pub async fn connect(&self, id: &str) -> Result<E2bExec, Error> {
        E2bExec::connect(self.config.clone(), self.http.clone(), self.api.clone(), id).await
    }

    /// A handle on sandbox `id` without calling the control plane; not owned. Its envd is taken
    /// to be [`EnvdVersion::CURRENT`] and it is given no access token: a secure sandbox (one
    /// created with `secure`) answers `Unauthenticated`; use [`attach_with`](Self::attach_with)
    /// with the token its creator handed over, or [`connect`](Self::connect).
    pub fn attach(&self, id: &str) -> Result<E2bExec, Error> {
        self.attach_with(Attach {
            sandbox_id: id.to_owned(),
            envd_access_token: None,
            envd_version: EnvdVersion::CURRENT.to_string(),
            domain: None,
        })
    }

    /// Uses a sandbox whose id, token and envd version are already known, without calling the
    /// control plane (for a sandbox created elsewhere that handed over its token). The handle
    /// does not own it.
    pub fn attach_with(&self, attach: Attach) -> Result<E2bExec, Error> {
        E2bExec::attach(
            self.config.clone(),
            self.http.clone(),
            self.api.clone(),
            attach,
        )
    }

    /// Lists the running and paused sandboxes `filter` selects (the API filters on metadata).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let listed = self
            .control()?
            .list(filter.labels())
            .await
            .map_err(|e| error::map(e, &Ctx::new("list", Stage::Before)))?;
        Ok(listed
            .into_iter()
            .map(|s| {
                let state = match s.state.as_str() {
                    "running" => SandboxState::Running,
                    "paused" | "pausing" => SandboxState::Paused,
                    _ => SandboxState::Unknown,
                };
                let mut info = SandboxInfo::new(s.sandbox_id)
                    .with_labels(s.metadata.unwrap_or_default())
                    .with_state(state);
                if !s.template_id.is_empty() {
                    info = info.with_image(s.template_id);
                }
                info
            })
            // The API filters already; a server that did not is caught here.
            .filter(|i| filter.matches(i))
            .collect())
    }

    /// Kills a sandbox (`DELETE /sandboxes/{id}`); one that does not exist is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(id)?).await
    }
}

impl Provider for E2bProvider {
    execseam_adapter_kit::accessors!(self => provider: PROVIDER);

    fn capabilities(&self) -> Capabilities {
        let mut c = crate::CAPABILITIES;
        if !self.config.native_tools {
            c.native_tools = &[];
        }
        c
    }

    execseam_adapter_kit::accessors!(self => lifecycle: LIFECYCLE);

    execseam_adapter_kit::forward_lifecycle!(
        E2bProvider: create, connect, attach, list, destroy, pause, resume, snapshot, list_snapshots, delete_snapshot, fork
    );

    fn expose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<ExposedPort, Error>> {
        Box::pin(async move { E2bProvider::expose(self, id, port) })
    }
}
