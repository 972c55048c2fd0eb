//! [`VercelProvider`]: the sandbox lifecycle over `/v3/sandboxes` and `/v2/sandboxes`.

use execseam_adapter_kit::retry::Stage;
use execseam_adapter_kit::text::escape_path_segment;
use execseam_core::{
    BoxFuture, Capabilities, Error, LifecycleCapabilities, ListFilter, Ownership, Provider,
    Sandbox, SandboxInfo, SandboxSpec, SandboxState,
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
            ports: c.ports.clone(),
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

    /// Connects to a sandbox by name (resuming it if it is stopped); the handle does not own it.
    pub async fn connect(&self, name: &str) -> Result<VercelExec, Error> {
        let path = format!("/v2/sandboxes/{}", escape_path_segment(name));
        let got: SandboxAndSession = self
            .api
            .json(
                Method::GET,
                &path,
                &[
                    ("projectId", &self.api.config.project_id),
                    ("resume", "true"),
                ],
                Body::None,
            )
            .await
            .map_err(|e| map(e, call("connect", Stage::Before)))?;
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
}
