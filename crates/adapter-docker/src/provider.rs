//! [`DockerProvider`]: containers as sandboxes.

use execseam_adapter_kit::Checks as _;
use execseam_adapter_kit::id;
use execseam_adapter_kit::vars;
use std::sync::Arc;

use secrecy::SecretString;

use execseam_adapter_kit::gone_is_destroyed;
use execseam_core::{
    Error, ErrorKind, LifecycleCapabilities, ListFilter, Ownership, Provider, Retry, SandboxInfo,
    SandboxSpec,
};

use crate::PROVIDER;
use crate::client::{self, Client, LABEL_SANDBOX};
use crate::config::{DockerConfig, Mode, parse_ulimits};
use crate::containers;
use crate::error::adapter;
use crate::exec::{DockerExec, Target};

/// Creates, connects to, lists and destroys containers through the Docker Engine API. Built
/// without I/O; cheap to clone (one client, negotiated on first use).
///
/// | operation | warm mode | per call |
/// |---|---|---|
/// | [`create`](Self::create) | `POST /containers/create` + `POST /containers/{id}/start` (keepalive under an init), then an inspect | no container yet: an image check (`GET /images/{name}/json`); every command creates its own |
/// | [`connect`](Self::connect) | `GET /containers/{id}/json`, and a start if it is stopped | `Unsupported` |
/// | [`list`](Self::list) | `GET /containers/json?all=1&filters={"label":[…]}` | `Unsupported` |
/// | [`destroy`](Self::destroy) | `DELETE /containers/{id}?force=1&v=1` (already gone is `Ok`) | removes the containers of the handle's commands still running |
#[derive(Clone, Debug)]
pub struct DockerProvider {
    pub(crate) config: DockerConfig,
    pub(crate) client: Arc<Client>,
}

execseam_adapter_kit::debug_fields!(self => Client { host: self.host });

/// The [`SandboxSpec::with_option`] keys: a value as the matching [`DockerConfig`] setter takes it
/// (`ulimits` as `name=soft:hard,…`, `init` as `true`/`false`).
pub const OPTIONS: &[&str] = &[
    "user",
    "network",
    "runtime",
    "ulimits",
    "worktree",
    "pids_limit",
    "init",
];

impl DockerProvider {
    /// A provider with this configuration; a bad one is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: DockerConfig) -> Result<DockerProvider, Error> {
        config.validate()?;
        let client = Arc::new(Client::new(&config)?);
        Ok(DockerProvider { config, client })
    }

    execseam_adapter_kit::provider_config!(self => DockerConfig: &self.config);

    /// [`LIFECYCLE`] in warm mode, [`PER_CALL_LIFECYCLE`] per call.
    pub fn lifecycle(&self) -> LifecycleCapabilities {
        <crate::Docker as execseam_adapter_kit::Adapter>::lifecycle(&self.config)
    }

    /// Creates a sandbox; the handle owns it (close removes the container). Warm: the container,
    /// started, its keepalive running. Per call: a handle whose commands each get a container.
    pub async fn create(&self, spec: SandboxSpec) -> Result<DockerExec, Error> {
        spec.check(PROVIDER, &self.lifecycle())?;
        let config = merge(&self.config, &spec)?;
        let docker = self.client.get().await?;
        let target = match config.mode {
            Mode::Warm => {
                let id = containers::create(docker, &config, client::labels(&config, [])).await?;
                Target::Container(id)
            }
            Mode::PerCall => {
                if !containers::image_exists(docker, &config.image).await? {
                    return Err(adapter(
                        ErrorKind::NotFound,
                        Retry::Never,
                        "create",
                        format!(
                            "image {:?} is not on the engine (the adapter never pulls)",
                            config.image
                        ),
                    ));
                }
                Target::PerCall(format!("per-call-{}", id::random_id(16)))
            }
        };
        Ok(DockerExec::new(
            config,
            self.client.clone(),
            target,
            Ownership::created(),
        ))
    }

    /// Connects to container `id` (any container, not only this adapter's; started if it is
    /// stopped); the handle does not own it. Commands run with this configuration's user and
    /// workdir; its image and limits are not applied to a container that already exists.
    pub async fn connect(&self, id: &str) -> Result<DockerExec, Error> {
        if self.config.mode == Mode::PerCall {
            return Err(per_call_has_no("connect"));
        }
        let exec = self.attach(id)?;
        let docker = self.client.get().await?;
        match containers::state(docker, id).await? {
            None => {
                return Err(adapter(
                    ErrorKind::NotFound,
                    Retry::Never,
                    "connect",
                    format!("no container {id:?}"),
                ));
            }
            Some(s) if !s.running => docker
                .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
                .await
                .map_err(|e| {
                    crate::error::engine(
                        "start container",
                        execseam_adapter_kit::retry::Stage::Before,
                        e,
                    )
                })?,
            Some(_) => {}
        }
        Ok(exec)
    }

    /// The handle for sandbox `id` without asking the engine anything (it does not own it): warm,
    /// container `id`, and one that does not exist (or an engine that is down) is reported by the
    /// first command; per call, a handle whose commands' containers carry the label
    /// [`LABEL_SANDBOX`]` = id`.
    pub fn attach(&self, id: &str) -> Result<DockerExec, Error> {
        let target = match self.config.mode {
            Mode::Warm => Target::Container(id.to_owned()),
            Mode::PerCall => Target::PerCall(id.to_owned()),
        };
        Ok(DockerExec::new(
            self.config.clone(),
            self.client.clone(),
            target,
            Ownership::connected(),
        ))
    }

    /// The warm containers this adapter created that carry `filter`'s labels and the
    /// configuration's, running or not (the engine filters on labels).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &self.lifecycle())?;
        let labels = client::labels(&self.config, filter.labels());
        let docker = self.client.get().await?;
        Ok(containers::list(docker, &labels)
            .await?
            .into_iter()
            // The engine filters already; one that did not is caught here.
            .filter(|i| filter.matches(i))
            .collect())
    }

    /// Removes container `id` (warm) and its anonymous volumes, or the containers of per-call
    /// handle `id`'s running commands; one already gone is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        let docker = self.client.get().await?;
        match self.config.mode {
            Mode::Warm => gone_is_destroyed(containers::destroy(docker, id).await),
            Mode::PerCall => {
                let labels =
                    client::labels(&self.config, [(&LABEL_SANDBOX.to_owned(), &id.to_owned())]);
                for c in containers::list(docker, &labels).await? {
                    gone_is_destroyed(containers::destroy(docker, &c.id).await)?;
                }
                Ok(())
            }
        }
    }
}

fn per_call_has_no(operation: &'static str) -> Error {
    Error::unsupported(format!(
        "per-call mode keeps no container between commands: nothing to {operation}"
    ))
    .with_provider(PROVIDER)
    .with_operation(operation)
}

/// The configuration with the spec over it.
fn merge(config: &DockerConfig, spec: &SandboxSpec) -> Result<DockerConfig, Error> {
    let mut c = config.clone();
    if let Some(image) = spec.image() {
        c.image = image.to_owned();
    }
    // A snapshot is an image (`crate::state`): one that was deleted is the create's NotFound.
    if let Some(snapshot) = spec.snapshot() {
        c.image = snapshot.to_owned();
    }
    c.ports = spec.ports().to_vec();
    for (k, v) in spec.env() {
        c.env.insert(k.clone(), SecretString::from(v.clone()));
    }
    c.labels.extend(spec.labels().clone());
    if let Some(l) = spec.lifetime() {
        match c.mode {
            Mode::Warm => c.lifetime = Some(l),
            Mode::PerCall => c.per_call_lifetime = l,
        }
    }
    if let Some(m) = spec.cpu_millis() {
        c.nano_cpus = Some(i64::from(m) * 1_000_000);
    }
    if let Some(m) = spec.memory_mib() {
        let bytes = i64::try_from(m.saturating_mul(1 << 20))
            .map_err(|_| vars::config_error(PROVIDER, format!("memory of {m} MiB is too large")))?;
        c.memory = Some(bytes);
    }
    for (key, value) in spec.options() {
        let bad =
            |what: &str| vars::config_error(PROVIDER, format!("option {key}={value:?}: {what}"));
        match key.as_str() {
            "user" => c.user = Some(value.clone()),
            "network" => c.network = value.clone(),
            "runtime" => c.runtime = Some(value.clone()),
            "ulimits" => c.ulimits = parse_ulimits(value)?,
            "worktree" => c.worktree = Some(value.clone()),
            "pids_limit" => c.pids_limit = Some(value.parse().map_err(|_| bad("not a number"))?),
            "init" => c.init = value.parse().map_err(|_| bad("expected true or false"))?,
            _ => return Err(bad("unknown")), // spec.check already refused it
        }
    }
    c.validate()?;
    Ok(c)
}

impl Provider for DockerProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: crate::CAPABILITIES,
        lifecycle: DockerProvider::lifecycle(self),
    );

    execseam_adapter_kit::forward_lifecycle!(
        DockerProvider: create, connect, attach, list, destroy, pause, resume, expose, exposed,
        snapshot, list_snapshots, delete_snapshot
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_spec_merges_over_the_configuration() {
        let base = DockerConfig::new("img").env("A", "1").label("team", "x");
        let spec = SandboxSpec::new()
            .with_image("other")
            .with_env("B", "2")
            .with_label("run", "7")
            .with_lifetime(Duration::from_secs(30))
            .with_cpu_millis(1500)
            .with_memory_mib(64)
            .with_option("user", "1000")
            .with_option("ulimits", "nofile=10:20")
            .with_option("init", "false");
        spec.check(PROVIDER, &crate::LIFECYCLE).unwrap();
        let c = merge(&base, &spec).unwrap();
        assert_eq!(c.image, "other");
        assert_eq!(c.env.len(), 2);
        assert_eq!(c.labels.get("run").map(String::as_str), Some("7"));
        assert_eq!(c.keepalive_argv(), ["sleep", "30"]);
        assert_eq!(c.nano_cpus, Some(1_500_000_000));
        assert_eq!(c.memory, Some(64 << 20));
        assert_eq!(c.user.as_deref(), Some("1000"));
        assert_eq!(c.ulimits[0].hard, 20);
        assert!(!c.init);
        let e = merge(&base, &SandboxSpec::new().with_option("init", "maybe")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn what_the_spec_cannot_say_is_refused_before_any_request() {
        let p =
            DockerProvider::new(DockerConfig::new("img").host("unix:///nonexistent.sock")).unwrap();
        for spec in [
            SandboxSpec::new().with_disk_mib(10),
            SandboxSpec::new().with_idle_timeout(Duration::from_secs(1)),
        ] {
            let e = spec.check(PROVIDER, &p.lifecycle()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported);
        }
        let e = SandboxSpec::new()
            .with_option("cap_add", "ALL")
            .check(PROVIDER, &p.lifecycle())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let per_call = DockerProvider::new(DockerConfig::new("img").mode(Mode::PerCall)).unwrap();
        assert_eq!(per_call.attach("x").unwrap().container_id(), None);
        let e = ListFilter::new()
            .check(PROVIDER, &per_call.lifecycle())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
}
