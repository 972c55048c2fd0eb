//! [`VercelProvider`]: the sandbox lifecycle over `/v3/sandboxes` and `/v2/sandboxes`.

use execseam_adapter_kit::retry::Stage;
use execseam_adapter_kit::text::escape_path_segment;
use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::time::{Duration, UNIX_EPOCH};

use execseam_core::{
    Error, ExposedPort, Kept, ListFilter, Ownership, Provider, Sandbox, SandboxInfo, SandboxSpec,
    SandboxState, SnapshotInfo, SnapshotOutcome, SnapshotRequest,
};
use reqwest::Method;
use serde::de::DeserializeOwned;

use crate::client::{Api, Body, http_client};
use crate::config::VercelConfig;
use crate::error::{call, map};
use crate::exec::VercelExec;
use crate::wire::{
    CreateSandbox, CreateSnapshot, Pagination, Resources, SandboxAndSession, SandboxPage,
    SandboxPayload, SnapshotAndSession, SnapshotPage, SnapshotPayload, SnapshotSource,
};
use crate::{CAPABILITIES, LIFECYCLE, PROVIDER};

/// The snapshot lifetimes the service takes besides "never" (`SnapshotExpiration` in
/// vercel-sandbox 0.10.0 `models.py`: "nonzero values must be between one day and ten years").
const SNAPSHOT_TTL_RANGE: (Duration, Duration) = (
    Duration::from_secs(24 * 3600),
    Duration::from_secs(10 * 365 * 24 * 3600),
);

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
/// | [`snapshot`](Self::snapshot) | `GET /v2/sandboxes/{name}?resume=true`, `POST /v2/sandboxes/sessions/{id}/snapshot {expiration}` | the filesystem; the session stops (destructive: needs `allow_stop`); kept 30 days unless a ttl is asked |
/// | create from a snapshot | `POST /v3/sandboxes` with `source: {type: "snapshot", snapshotId}` | no `runtime`/`image` sent (the snapshot has them); a deleted one is `NotFound` |
/// | [`list_snapshots`](Self::list_snapshots) | `GET /v2/sandboxes/snapshots?project=&name=` | every page |
/// | [`delete_snapshot`](Self::delete_snapshot) | `DELETE /v2/sandboxes/snapshots/{id}` | a 404 is `Ok` |
/// | fork | snapshot, create from it, delete it (the core's default) | the source is left stopped; not the service's `/fork`, which starts from the source's last snapshot, not its current files |
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

    execseam_adapter_kit::provider_config!(self => VercelConfig: &self.api.config);

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
        match (spec.snapshot(), spec.image().map(str::to_owned)) {
            // The snapshot holds the runtime or image it was taken of.
            (Some(snapshot), _) => {
                body.source = Some(SnapshotSource {
                    snapshot_id: snapshot.to_owned(),
                });
            }
            (None, image) => match image.or_else(|| c.runtime.clone()) {
                Some(i) if RUNTIMES.contains(&i.as_str()) => body.runtime = Some(i),
                Some(i) => body.image = Some(i),
                None => {}
            },
        }
        let vcpus = match spec.cpu_millis() {
            Some(m) => Some(m.div_ceil(1000).max(1)),
            None => c.vcpus,
        };
        body.resources = vcpus.map(|vcpus| Resources { vcpus });
        body.env = c.sandbox_env.exposed();
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
        let exposed = self.exposed(name).await?;
        execseam_adapter_kit::declared_port(PROVIDER, name, port, exposed)
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
        let q: Vec<(&str, &str)> = tag.iter().map(|t| ("tags", t.as_str())).collect();
        let all = self
            .pages("/v2/sandboxes", &q, "list", |p: SandboxPage| {
                (p.sandboxes, p.pagination)
            })
            .await?;
        Ok(all
            .into_iter()
            .map(info)
            .filter(|i| filter.matches(i))
            .collect())
    }

    /// Every page of a listing of the project (`pagination.next` is the next cursor).
    async fn pages<P: DeserializeOwned, T>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        op: &'static str,
        split: impl Fn(P) -> (Vec<T>, Pagination),
    ) -> Result<Vec<T>, Error> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut q: Vec<(&str, &str)> = vec![("project", &self.api.config.project_id)];
            q.extend_from_slice(query);
            if let Some(c) = &cursor {
                q.push(("cursor", c));
            }
            let page: P = self
                .api
                .json(Method::GET, path, &q, Body::None)
                .await
                .map_err(|e| map(e, call(op, Stage::Before)))?;
            let (items, pagination) = split(page);
            out.extend(items);
            match pagination.next {
                Some(n) if Some(&n) != cursor.as_ref() => cursor = Some(n),
                _ => return Ok(out),
            }
        }
    }

    /// Snapshots sandbox `name`'s filesystem: the current session (resumed first if the
    /// sandbox is stopped, as the SDKs' `snapshot()` does) stops, and the snapshot is what
    /// [`SandboxSpec::with_snapshot`] starts a sandbox from. Destructive: the request must
    /// allow the stop. Kept for the request's ttl (one day to ten years), forever when it asks
    /// `never_expires` (`expiration: 0`), else 30 days.
    pub async fn snapshot(
        &self,
        name: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        const OP: &str = "snapshot";
        let kind = LIFECYCLE.state.check_snapshot(PROVIDER, &request)?;
        if let Some(ttl) = request.ttl
            && !(SNAPSHOT_TTL_RANGE.0..=SNAPSHOT_TTL_RANGE.1).contains(&ttl)
        {
            return Err(Error::invalid_config(format!(
                "a Vercel snapshot lives one day to ten years, not {ttl:?}"
            ))
            .with_provider(PROVIDER)
            .with_operation(OP));
        }
        let session = self.get(name, true, OP).await?.session.id;
        let path = format!(
            "/v2/sandboxes/sessions/{}/snapshot",
            escape_path_segment(&session)
        );
        let body = CreateSnapshot {
            expiration: if request.never_expires {
                Some(0)
            } else {
                request.ttl.map(|d| d.as_millis() as u64)
            },
        };
        let taken: SnapshotAndSession = self
            .api
            .json(Method::POST, &path, &[], Body::json(&body))
            .await
            .map_err(|e| map(e, call(OP, Stage::Submit)))?;
        let state = if taken.session.status == "running" {
            SandboxState::Running
        } else {
            SandboxState::Stopped
        };
        Ok(SnapshotOutcome::new(
            snapshot_info(taken.snapshot, kind).with_source(name),
            state,
        ))
    }

    /// The project's snapshots, of sandbox `source` only when given.
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        LIFECYCLE.state.check_list_snapshots(PROVIDER)?;
        let q: Vec<(&str, &str)> = source.iter().map(|n| ("name", *n)).collect();
        let all = self
            .pages(
                "/v2/sandboxes/snapshots",
                &q,
                "list_snapshots",
                |p: SnapshotPage| (p.snapshots, p.pagination),
            )
            .await?;
        Ok(all
            .into_iter()
            .filter(|s| s.status == "created")
            .map(|s| {
                let i = snapshot_info(s, Kept::Filesystem);
                match source {
                    Some(n) => i.with_source(n),
                    None => i,
                }
            })
            .collect())
    }

    /// Deletes a snapshot (`DELETE /v2/sandboxes/snapshots/{id}`); one already gone is `Ok(())`.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        LIFECYCLE.state.check_delete_snapshot(PROVIDER, snapshot)?;
        let path = format!("/v2/sandboxes/snapshots/{}", escape_path_segment(snapshot));
        let r = self
            .api
            .json::<serde_json::Value>(Method::DELETE, &path, &[], Body::None)
            .await
            .map(drop)
            .map_err(|e| map(e, call("delete_snapshot", Stage::Before)));
        execseam_adapter_kit::gone_is_destroyed(r)
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

fn snapshot_info(s: SnapshotPayload, kind: Kept) -> SnapshotInfo {
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let mut i = SnapshotInfo::new(s.id, kind)
        .with_created(at(s.created_at))
        .with_size(s.size_bytes);
    if let Some(t) = s.expires_at {
        i = i.with_expires(at(t));
    }
    i
}

impl Provider for VercelProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: CAPABILITIES,
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(
        VercelProvider: create, connect, attach, list, destroy, snapshot, list_snapshots, delete_snapshot, expose, exposed
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_adapter_kit::Adapter as _;
    use execseam_core::ErrorKind;

    /// A provider whose API is a closed port: anything that reached the network would fail
    /// with a transport error, not the refusals checked here.
    fn offline() -> VercelProvider {
        let c = crate::Vercel::config_from(&|k: &str| {
            match k {
                "VERCEL_TOKEN" => Some("t"),
                "VERCEL_TEAM_ID" => Some("team"),
                "VERCEL_PROJECT_ID" => Some("prj"),
                "VERCEL_API_URL" => Some("http://127.0.0.1:9"),
                _ => None,
            }
            .map(str::to_owned)
        })
        .unwrap();
        VercelProvider::new(c).unwrap()
    }

    #[tokio::test]
    async fn a_snapshot_is_refused_before_any_request_unless_it_may_stop_the_sandbox_for_a_valid_ttl()
     {
        let p = offline();
        let e = p.snapshot("s", SnapshotRequest::new()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        for ttl in [
            Duration::from_secs(3600),
            Duration::from_secs(11 * 365 * 86400),
        ] {
            let r = SnapshotRequest::new().allow_stop(true).ttl(ttl);
            let e = p.snapshot("s", r).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{ttl:?}: {e}");
        }
        let r = SnapshotRequest::new().allow_stop(true).name("n");
        assert_eq!(
            p.snapshot("s", r).await.unwrap_err().kind(),
            ErrorKind::Unsupported
        );
    }
}
