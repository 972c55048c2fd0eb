//! [`VercelProvider`]: the sandbox lifecycle over `/v3/sandboxes` and `/v2/sandboxes`.

use execseam_adapter_kit::retry::Stage;
use execseam_adapter_kit::text::escape_path_segment;
use execseam_core::{
    BoxFuture, Capabilities, Error, ExposedPort, LifecycleCapabilities, ListFilter, Ownership,
    Provider, Sandbox, SandboxInfo, SandboxSpec, SandboxState,
};
use reqwest::Method;

use crate::client::{Api, Body, http_client};
use crate::config::VercelConfig;
use crate::error::{call, map};
use crate::exec::VercelExec;
use crate::wire::{CreateSandbox, Resources, SandboxAndSession, SandboxPage, SandboxPayload};
use crate::{CAPABILITIES, LIFECYCLE, PROVIDER};

/// The runtimes the API names (anything else in [`SandboxSpec::with_image`] is a custom image).
const RUNTIMES: &[&str] = &["node26", "node24", "node22", "python3.13"];

/// Creates, connects to, lists and deletes Vercel sandboxes. Built without I/O; cheap to clone.
///
/// | operation | Vercel call | notes |
/// |---|---|---|
/// | [`create`](Self::create) | `POST /v3/sandboxes` | image → `runtime` (`node24`, …) or `image`; env → `env`; labels → `tags`; lifetime → `timeout` (ms); CPU → `resources.vcpus`; option `name` |
/// | [`connect`](Self::connect) | `GET /v2/sandboxes/{name}?resume=true` | a stopped sandbox resumes in a new session |
/// | [`list`](Self::list) | `GET /v2/sandboxes?project=&tags=k:v` | every page (`pagination.next`); one tag filtered by the API, the rest here |
/// | [`destroy`](Self::destroy) | `DELETE /v2/sandboxes/{name}` | stops the session and deletes the sandbox; a 404 is `Ok` |
#[derive(Clone, Debug)]
pub struct VercelProvider {
    api: Api,
}

impl VercelProvider {
    /// A provider with this configuration; a bad URL or missing credentials is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: VercelConfig) -> Result<VercelProvider, Error> {
        let base = config.validate()?;
        let http = http_client(&config)?;
        Ok(VercelProvider {
            api: Api { http, base, config },
        })
    }

    /// [`VercelConfig::from_env`], then [`new`](Self::new).
    pub fn from_env() -> Result<VercelProvider, Error> {
        VercelProvider::new(VercelConfig::from_env()?)
    }

    /// The configuration.
    pub fn config(&self) -> &VercelConfig {
        &self.api.config
    }

    /// Creates a sandbox; the handle owns it (close deletes it).
    pub async fn create(&self, spec: SandboxSpec) -> Result<VercelExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let c = &self.api.config;
        let mut body = CreateSandbox {
            project_id: c.project_id.clone(),
            name: spec.options().get("name").cloned(),
            timeout: spec
                .lifetime()
                .or(c.sandbox_timeout)
                .map(|d| d.as_millis() as u64),
            ports: {
                let mut ports = c.ports.clone();
                ports.extend(spec.ports().iter().filter(|p| !c.ports.contains(p)));
                ports
            },
            ..CreateSandbox::default()
        };
        match spec
            .image()
            .map(str::to_owned)
            .or_else(|| c.runtime.clone())
        {
            Some(i) if RUNTIMES.contains(&i.as_str()) => body.runtime = Some(i),
            Some(i) => body.image = Some(i),
            None => {}
        }
        let vcpus = match spec.cpu_millis() {
            Some(m) => Some(m.div_ceil(1000).max(1)),
            None => c.vcpus,
        };
        body.resources = vcpus.map(|vcpus| Resources { vcpus });
        body.env = c.sandbox_env.clone();
        body.env.extend(spec.env().clone());
        body.tags = c.tags.clone();
        body.tags.extend(spec.labels().clone());
        let created: SandboxAndSession = self
            .api
            .json(Method::POST, "/v3/sandboxes", &[], Body::json(&body))
            .await
            .map_err(|e| map(e, call("create", Stage::Submit)))?;
        Ok(VercelExec::new(
            self.api.clone(),
            created.sandbox.name,
            created.session.id,
            Ownership::created(),
        ))
    }

    /// `GET /v2/sandboxes/{name}` (`resume=true` starts a stopped sandbox's new session).
    async fn get(
        &self,
        name: &str,
        resume: bool,
        op: &'static str,
    ) -> Result<SandboxAndSession, Error> {
        let path = format!("/v2/sandboxes/{}", escape_path_segment(name));
        let mut query = vec![("projectId", self.api.config.project_id.as_str())];
        if resume {
            query.push(("resume", "true"));
        }
        self.api
            .json(Method::GET, &path, &query, Body::None)
            .await
            .map_err(|e| map(e, call(op, Stage::Before)))
    }

    /// Connects to a sandbox by name (resuming it if it is stopped); the handle does not own it.
    pub async fn connect(&self, name: &str) -> Result<VercelExec, Error> {
        let got = self.get(name, true, "connect").await?;
        Ok(VercelExec::new(
            self.api.clone(),
            got.sandbox.name,
            got.session.id,
            Ownership::connected(),
        ))
    }

    /// A handle on sandbox `name` without calling the API; not owned. Its current session is
    /// looked up (and resumed if stopped) on first use.
    pub fn attach(&self, name: &str) -> Result<VercelExec, Error> {
        Ok(VercelExec::new(
            self.api.clone(),
            name.to_owned(),
            String::new(),
            Ownership::connected(),
        ))
    }

    /// A handle on sandbox `name` in session `session_id`, both known, without calling the API
    /// (a stopped session is resumed on first use); not owned.
    pub fn attach_session(&self, name: &str, session_id: &str) -> VercelExec {
        VercelExec::new(
            self.api.clone(),
            name.to_owned(),
            session_id.to_owned(),
            Ownership::connected(),
        )
    }

    /// The public URL of `port`, a port declared at create (the sandbox's `routes`, which the
    /// Python SDK's `routes`); a port not declared is `InvalidConfig`.
    pub async fn expose(&self, name: &str, port: u16) -> Result<ExposedPort, Error> {
        LIFECYCLE.state.check_expose(PROVIDER, port)?;
        self.exposed(name)
            .await?
            .into_iter()
            .find(|e| e.port == port)
            .ok_or_else(|| {
                Error::invalid_config(format!(
                    "port {port} of sandbox {name} has no route: Vercel routes only the ports declared at create (SandboxSpec::with_port)"
                ))
                .with_provider(PROVIDER)
                .with_operation("expose")
            })
    }

    /// The routes of sandbox `name`: every port declared at create, with its public URL.
    pub async fn exposed(&self, name: &str) -> Result<Vec<ExposedPort>, Error> {
        LIFECYCLE.state.check_exposed(PROVIDER)?;
        let got = self.get(name, false, "exposed").await?;
        Ok(got
            .routes
            .into_iter()
            .map(|r| ExposedPort::new(r.port, r.url))
            .collect())
    }

    /// Lists the project's sandboxes that `filter` selects.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let tag = filter
            .labels()
            .iter()
            .next()
            .map(|(k, v)| format!("{k}:{v}"));
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut q: Vec<(&str, &str)> = vec![("project", &self.api.config.project_id)];
            if let Some(t) = &tag {
                q.push(("tags", t));
            }
            if let Some(c) = &cursor {
                q.push(("cursor", c));
            }
            let page: SandboxPage = self
                .api
                .json(Method::GET, "/v2/sandboxes", &q, Body::None)
                .await
                .map_err(|e| map(e, call("list", Stage::Before)))?;
            out.extend(page.sandboxes.into_iter().map(info));
            match page.pagination.next {
                Some(n) if Some(&n) != cursor.as_ref() => cursor = Some(n),
                _ => break,
            }
        }
        Ok(out.into_iter().filter(|i| filter.matches(i)).collect())
    }

    /// Deletes a sandbox (`DELETE /v2/sandboxes/{name}`); one that does not exist is `Ok(())`.
    pub async fn destroy(&self, name: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(name)?).await
    }
}

fn info(s: SandboxPayload) -> SandboxInfo {
    let state = match s.status.as_str() {
        "running" => SandboxState::Running,
        "pending" => SandboxState::Starting,
        "stopped" | "stopping" | "failed" | "aborted" => SandboxState::Stopped,
        _ => SandboxState::Unknown,
    };
    let mut i = SandboxInfo::new(s.name)
        .with_labels(s.tags.unwrap_or_default())
        .with_state(state);
    if let Some(image) = s.runtime.or(s.image) {
        i = i.with_image(image);
    }
    i
}

impl Provider for VercelProvider {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn lifecycle(&self) -> LifecycleCapabilities {
        LIFECYCLE
    }

    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move { Ok(Box::new(VercelProvider::create(self, spec).await?) as _) })
    }

    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move { Ok(Box::new(VercelProvider::connect(self, id).await?) as _) })
    }

    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        Ok(Box::new(VercelProvider::attach(self, id)?))
    }

    fn list<'a>(
        &'a self,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
        Box::pin(VercelProvider::list(self, filter))
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(VercelProvider::destroy(self, id))
    }

    fn expose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<ExposedPort, Error>> {
        Box::pin(VercelProvider::expose(self, id, port))
    }

    fn exposed<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<ExposedPort>, Error>> {
        Box::pin(VercelProvider::exposed(self, id))
    }
}
