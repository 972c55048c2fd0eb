//! [`NorthflankProvider`]: connect to a running service or job, list the project's services.
//! Northflank's exec protocol creates and deletes nothing; those are the platform's own
//! (service and job definitions), not a sandbox lifecycle.

use execseam_adapter_kit::Checks as _;
use execseam_adapter_kit::retry::Stage;
use execseam_adapter_kit::text::escape_path_segment;
use execseam_core::{Error, ListFilter, Provider, SandboxInfo, SandboxSpec, SandboxState};

use crate::client::Api;
use crate::config::NorthflankConfig;
use crate::error::{CallError, call, map};
use crate::exec::{NorthflankExec, Target};
use crate::{CAPABILITIES, LIFECYCLE, PROVIDER};

/// Connects to Northflank services and jobs. Built without I/O; cheap to clone.
///
/// | operation | Northflank call | notes |
/// |---|---|---|
/// | create | none | `Unsupported`: services and jobs are defined on the platform |
/// | [`connect`](Self::connect) | `GET /v1/projects/{p}/services/{id}` (or `jobs/{id}`) | checks it exists; commands then go over `/v1/command-exec/…` |
/// | [`list`](Self::list) | `GET /v1/projects/{p}/services` | the project's services; no labels, so only an empty filter |
/// | destroy | none | `Unsupported`: deleting a service is not this adapter's to do |
#[derive(Clone, Debug)]
pub struct NorthflankProvider {
    api: Api,
}

impl NorthflankProvider {
    /// A provider with this configuration; a bad URL or a missing token is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: NorthflankConfig) -> Result<NorthflankProvider, Error> {
        let base = config.validate()?;
        let api = Api::new(config, base)?;
        Ok(NorthflankProvider { api })
    }

    execseam_adapter_kit::provider_config!(self => NorthflankConfig: &self.api.config);

    /// Always `Unsupported` (after the spec check): Northflank's exec creates nothing; services
    /// and jobs are defined on the platform. Connect to one instead.
    pub async fn create(&self, spec: SandboxSpec) -> Result<NorthflankExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        Err(Error::unsupported(
            "Northflank's exec cannot create a service or job (connect-only): connect to one",
        )
        .with_provider(PROVIDER)
        .with_operation("create"))
    }

    /// Always `Unsupported`: deleting a service or job is not an exec operation.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        let _ = Target::parse(id)?;
        Err(Error::unsupported(
            "Northflank's exec cannot delete the service or job it runs in (connect-only)",
        )
        .with_provider(PROVIDER)
        .with_operation("destroy"))
    }

    /// A handle on a service (`svc` or `services/svc`) or a job (`jobs/job`), after checking it
    /// exists. It does not own what it runs in.
    pub async fn connect(&self, id: &str) -> Result<NorthflankExec, Error> {
        let target = Target::parse(id)?;
        let (segment, name) = target.segment();
        let path = self
            .api
            .project_path(&format!("{segment}/{}", escape_path_segment(name)));
        let data = self.api.get(&path, call("connect", Stage::Before)).await?;
        if data.get("id").and_then(|v| v.as_str()) != Some(name) {
            return Err(map(
                CallError::Protocol(format!("the {segment} answer does not name {name:?}")),
                call("connect", Stage::Before),
            ));
        }
        Ok(NorthflankExec::new(self.api.clone(), target))
    }

    /// A handle on service `id` (or job `jobs/<id>`) without checking it (no I/O).
    pub fn attach(&self, id: &str) -> Result<NorthflankExec, Error> {
        Ok(NorthflankExec::new(self.api.clone(), Target::parse(id)?))
    }

    /// The project's services (Northflank has no labels to filter on: a filter with labels is
    /// `Unsupported`).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let data = self
            .api
            .get(
                &self.api.project_path("services"),
                call("list", Stage::Before),
            )
            .await?;
        let services = data["services"].as_array().cloned().unwrap_or_default();
        Ok(services
            .iter()
            .filter_map(|s| {
                let id = s["id"].as_str()?;
                let state = match s["status"]["deployment"]["status"].as_str() {
                    Some("COMPLETED") => SandboxState::Running,
                    Some("PENDING" | "IN_PROGRESS") => SandboxState::Starting,
                    _ => SandboxState::Unknown,
                };
                Some(SandboxInfo::new(id).with_state(state))
            })
            .collect())
    }
}

impl Provider for NorthflankProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: CAPABILITIES,
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(NorthflankProvider: create, connect, attach, list, destroy);
}
