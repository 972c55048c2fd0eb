//! Configuration of the container adapter.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use execseam_core::Error;

use crate::error::invalid_config;

/// The engine socket when neither the configuration nor `DOCKER_HOST` names one (Docker's
/// default; podman's rootful `podman.socket` listens at `/run/podman/podman.sock`).
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// Where the worktree is mounted inside the container, and the default workdir when one is set.
pub const WORKSPACE: &str = "/workspace";

/// The image (required by [`DockerConfig::from_env`]).
pub const ENV_IMAGE: &str = "EXECSEAM_DOCKER_IMAGE";
/// `warm` (default) or `per-call`.
pub const ENV_MODE: &str = "EXECSEAM_DOCKER_MODE";
/// Warm mode: connect to this container instead of creating one.
pub const ENV_CONTAINER: &str = "EXECSEAM_DOCKER_CONTAINER";
/// A host directory bind-mounted read-write at [`WORKSPACE`].
pub const ENV_WORKTREE: &str = "EXECSEAM_DOCKER_WORKTREE";
/// The OCI runtime the engine should use (`runc` where crun cannot run, as on hybrid cgroups).
pub const ENV_RUNTIME: &str = "EXECSEAM_DOCKER_RUNTIME";
/// Ulimits, `name=soft:hard` separated by commas (`nofile=1024:1024,nproc=4096:4096`).
pub const ENV_ULIMITS: &str = "EXECSEAM_DOCKER_ULIMITS";
/// The user commands run as (`uid`, `uid:gid` or a name in the image).
pub const ENV_USER: &str = "EXECSEAM_DOCKER_USER";
/// The network mode (default `none`).
pub const ENV_NETWORK: &str = "EXECSEAM_DOCKER_NETWORK";
/// A memory limit in bytes (swap is limited to the same, so there is none).
pub const ENV_MEMORY: &str = "EXECSEAM_DOCKER_MEMORY";

/// How commands reach containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One long-lived container (created, or connected to by id); every command is a Docker exec
    /// in it, so files and processes persist between commands.
    Warm,
    /// A fresh container per command, removed when the command ends: only the bind-mounted
    /// worktree survives between commands.
    PerCall,
}

impl Mode {
    /// `warm` or `per-call`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Warm => "warm",
            Mode::PerCall => "per-call",
        }
    }
}

impl FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode, Error> {
        match s {
            "warm" => Ok(Mode::Warm),
            "per-call" => Ok(Mode::PerCall),
            other => Err(invalid_config(format!(
                "mode {other:?}: expected `warm` or `per-call`"
            ))),
        }
    }
}

/// One resource limit (`--ulimit name=soft:hard`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ulimit {
    /// `nofile`, `nproc`, …
    pub name: String,
    /// The soft limit.
    pub soft: i64,
    /// The hard limit.
    pub hard: i64,
}

impl FromStr for Ulimit {
    type Err = Error;
    /// `name=soft:hard` or `name=both`, as `docker run --ulimit` takes it.
    fn from_str(s: &str) -> Result<Ulimit, Error> {
        let bad = || invalid_config(format!("ulimit {s:?}: expected name=soft:hard"));
        let (name, limits) = s.split_once('=').ok_or_else(bad)?;
        let (soft, hard) = limits.split_once(':').unwrap_or((limits, limits));
        let soft: i64 = soft.parse().map_err(|_| bad())?;
        let hard: i64 = hard.parse().map_err(|_| bad())?;
        if name.is_empty() || soft > hard {
            return Err(bad());
        }
        Ok(Ulimit {
            name: name.to_owned(),
            soft,
            hard,
        })
    }
}

/// What the adapter creates containers from, and how it talks to the engine.
#[derive(Clone)]
pub struct DockerConfig {
    pub(crate) host: Option<String>,
    pub(crate) image: String,
    pub(crate) mode: Mode,
    pub(crate) user: Option<String>,
    pub(crate) init: bool,
    pub(crate) runtime: Option<String>,
    pub(crate) ulimits: Vec<Ulimit>,
    pub(crate) memory: Option<i64>,
    pub(crate) nano_cpus: Option<i64>,
    pub(crate) pids_limit: Option<i64>,
    pub(crate) network: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) keepalive: Option<Vec<String>>,
    pub(crate) worktree: Option<String>,
    pub(crate) request_timeout: Duration,
    pub(crate) per_call_lifetime: Duration,
    pub(crate) temp_dir: String,
}

impl fmt::Debug for DockerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DockerConfig")
            .field("host", &self.host)
            .field("image", &self.image)
            .field("mode", &self.mode)
            .field("user", &self.user)
            .field("init", &self.init)
            .field("runtime", &self.runtime)
            .field("ulimits", &self.ulimits)
            .field("memory", &self.memory)
            .field("nano_cpus", &self.nano_cpus)
            .field("pids_limit", &self.pids_limit)
            .field("network", &self.network)
            .field("labels", &self.labels)
            .field("keepalive", &self.keepalive)
            .field("worktree", &self.worktree)
            .field("request_timeout", &self.request_timeout)
            .field("per_call_lifetime", &self.per_call_lifetime)
            .field("temp_dir", &self.temp_dir)
            .finish()
    }
}

impl DockerConfig {
    /// Containers from `image` (which must already be on the engine: the adapter never pulls),
    /// in [`Mode::Warm`], with an init, no network, as the image's user, through `DOCKER_HOST`.
    pub fn new(image: impl Into<String>) -> DockerConfig {
        DockerConfig {
            host: None,
            image: image.into(),
            mode: Mode::Warm,
            user: None,
            init: true,
            runtime: None,
            ulimits: Vec::new(),
            memory: None,
            nano_cpus: None,
            pids_limit: None,
            network: "none".to_owned(),
            labels: BTreeMap::new(),
            keepalive: None,
            worktree: None,
            request_timeout: Duration::from_secs(120),
            per_call_lifetime: Duration::from_secs(3600),
            temp_dir: "/tmp".to_owned(),
        }
    }

    /// Reads the configuration from the environment: `DOCKER_HOST` (the engine; default
    /// [`DEFAULT_HOST`]), [`ENV_IMAGE`] (required), [`ENV_MODE`], [`ENV_WORKTREE`], [`ENV_RUNTIME`],
    /// [`ENV_ULIMITS`], [`ENV_USER`], [`ENV_NETWORK`], [`ENV_MEMORY`].
    pub fn from_env() -> Result<DockerConfig, Error> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let image = var(ENV_IMAGE).ok_or_else(|| {
            invalid_config(format!(
                "{ENV_IMAGE} is not set (the image commands run in; the adapter never pulls)"
            ))
        })?;
        let mut c = DockerConfig::new(image);
        c.host = var("DOCKER_HOST");
        if let Some(m) = var(ENV_MODE) {
            c.mode = m.parse()?;
        }
        c.worktree = var(ENV_WORKTREE);
        c.runtime = var(ENV_RUNTIME);
        if let Some(u) = var(ENV_ULIMITS) {
            c.ulimits = u
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::parse)
                .collect::<Result<_, _>>()?;
        }
        c.user = var(ENV_USER);
        if let Some(n) = var(ENV_NETWORK) {
            c.network = n;
        }
        if let Some(m) = var(ENV_MEMORY) {
            let bytes = m.parse().map_err(|_| {
                invalid_config(format!("{ENV_MEMORY}={m:?} is not a number of bytes"))
            })?;
            c.memory = Some(bytes);
        }
        c.validate()?;
        Ok(c)
    }

    /// The engine: `unix:///path`, `tcp://host:port` or `http://…` (`https://` with the `tls`
    /// feature). Default: `DOCKER_HOST`, else [`DEFAULT_HOST`].
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// [`Mode::Warm`] (default) or [`Mode::PerCall`].
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The user commands run as (`uid`, `uid:gid`, or a name the image knows); default: the
    /// image's.
    #[must_use]
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Whether the container runs an init as PID 1 (default true): without one the keepalive
    /// process is PID 1, ignores SIGTERM and makes every stop wait for the engine's timeout.
    #[must_use]
    pub fn init(mut self, init: bool) -> Self {
        self.init = init;
        self
    }

    /// The OCI runtime (`HostConfig.Runtime`), e.g. `runc`; default: the engine's.
    #[must_use]
    pub fn runtime(mut self, runtime: impl Into<String>) -> Self {
        self.runtime = Some(runtime.into());
        self
    }

    /// Adds a ulimit (`HostConfig.Ulimits`).
    #[must_use]
    pub fn ulimit(mut self, name: impl Into<String>, soft: i64, hard: i64) -> Self {
        self.ulimits.push(Ulimit {
            name: name.into(),
            soft,
            hard,
        });
        self
    }

    /// A memory limit in bytes, with no swap beyond it.
    #[must_use]
    pub fn memory(mut self, bytes: i64) -> Self {
        self.memory = Some(bytes);
        self
    }

    /// A CPU limit in units of 10⁻⁹ CPUs (`HostConfig.NanoCpus`; `1_500_000_000` is 1.5 CPUs).
    #[must_use]
    pub fn nano_cpus(mut self, nano_cpus: i64) -> Self {
        self.nano_cpus = Some(nano_cpus);
        self
    }

    /// The most processes the container may hold (`HostConfig.PidsLimit`).
    #[must_use]
    pub fn pids_limit(mut self, limit: i64) -> Self {
        self.pids_limit = Some(limit);
        self
    }

    /// The network mode (`HostConfig.NetworkMode`); default `none`, so commands have no network
    /// unless asked. `bridge` (Docker) or `slirp4netns`/`pasta` (rootless podman) give one.
    #[must_use]
    pub fn network(mut self, mode: impl Into<String>) -> Self {
        self.network = mode.into();
        self
    }

    /// Adds a label to every container the adapter creates (and to the filter of
    /// [`DockerExec::list`](crate::DockerExec::list)).
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The container's main process, which only keeps it alive (default `sleep infinity` in warm
    /// mode and `sleep <per-call lifetime in seconds>` per call); the image must have it.
    #[must_use]
    pub fn keepalive<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keepalive = Some(argv.into_iter().map(Into::into).collect());
        self
    }

    /// A host directory (absolute) bind-mounted read-write at [`WORKSPACE`], which is then the
    /// default workdir. In per-call mode it is the only thing that survives between commands.
    #[must_use]
    pub fn worktree(mut self, host_dir: impl Into<String>) -> Self {
        self.worktree = Some(host_dir.into());
        self
    }

    /// How long one engine request may take to answer (default 120 s); streams and waits are not
    /// bounded by it (that is the host's deadline layer).
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest a per-call container can live (default 1 h): its keepalive ends then, and the
    /// engine removes it, even if this process died without removing it.
    #[must_use]
    pub fn per_call_lifetime(mut self, lifetime: Duration) -> Self {
        self.per_call_lifetime = lifetime;
        self
    }

    /// Where stdin is stored before the command reads it (default `/tmp`; absolute, writable by
    /// the commands' user).
    #[must_use]
    pub fn temp_dir(mut self, dir: impl Into<String>) -> Self {
        self.temp_dir = dir.into();
        self
    }

    /// The image.
    pub fn image_name(&self) -> &str {
        &self.image
    }

    /// The mode.
    pub fn current_mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn keepalive_argv(&self) -> Vec<String> {
        match (&self.keepalive, self.mode) {
            (Some(argv), _) => argv.clone(),
            (None, Mode::Warm) => vec!["sleep".into(), "infinity".into()],
            (None, Mode::PerCall) => vec![
                "sleep".into(),
                self.per_call_lifetime.as_secs().max(1).to_string(),
            ],
        }
    }

    /// The workdir of a command that names none.
    pub(crate) fn default_workdir(&self) -> Option<&str> {
        self.worktree.as_ref().map(|_| WORKSPACE)
    }

    /// Checks what can be checked before any request.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.image.trim().is_empty() {
            return Err(invalid_config("the image name is empty"));
        }
        if let Some(argv) = &self.keepalive
            && argv.first().is_none_or(|p| p.is_empty())
        {
            return Err(invalid_config("the keepalive command is empty"));
        }
        if let Some(w) = &self.worktree
            && (!w.starts_with('/') || w.contains(':'))
        {
            return Err(invalid_config(format!(
                "worktree {w:?}: expected an absolute host path without `:`"
            )));
        }
        for u in &self.ulimits {
            if u.name.is_empty() || u.soft > u.hard {
                return Err(invalid_config(format!("ulimit {u:?}: soft above hard")));
            }
        }
        for (k, v) in &self.labels {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(invalid_config(format!("label key {k:?} is not valid")));
            }
        }
        if !self.temp_dir.starts_with('/') {
            return Err(invalid_config(format!(
                "temp dir {:?}: expected an absolute path",
                self.temp_dir
            )));
        }
        if self.network.is_empty() {
            return Err(invalid_config("the network mode is empty"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::ErrorKind;

    #[test]
    fn ulimits_parse_like_docker_run() {
        assert_eq!(
            "nofile=1024:2048".parse::<Ulimit>().unwrap(),
            Ulimit {
                name: "nofile".into(),
                soft: 1024,
                hard: 2048
            }
        );
        assert_eq!("nproc=10".parse::<Ulimit>().unwrap().hard, 10);
        for bad in ["nofile", "nofile=a:b", "=1:1", "nofile=3:2"] {
            let e = bad.parse::<Ulimit>().unwrap_err();
            assert_eq!(e.kind(), crate::error::INVALID_CONFIG, "{bad}");
        }
    }

    #[test]
    fn bad_configuration_is_rejected_before_any_request() {
        let cases = [
            DockerConfig::new(" "),
            DockerConfig::new("img").worktree("relative/dir"),
            DockerConfig::new("img").worktree("/a:b"),
            DockerConfig::new("img").keepalive(Vec::<String>::new()),
            DockerConfig::new("img").label("a=b", "c"),
            DockerConfig::new("img").ulimit("nofile", 2, 1),
            DockerConfig::new("img").network(""),
        ];
        for c in cases {
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), crate::error::INVALID_CONFIG, "{c:?}");
            assert_ne!(e.kind(), ErrorKind::Internal);
        }
        DockerConfig::new("img").worktree("/w").validate().unwrap();
    }

    #[test]
    fn keepalive_defaults_follow_the_mode() {
        assert_eq!(
            DockerConfig::new("i").keepalive_argv(),
            ["sleep", "infinity"]
        );
        let per_call = DockerConfig::new("i")
            .mode(Mode::PerCall)
            .per_call_lifetime(Duration::from_secs(90));
        assert_eq!(per_call.keepalive_argv(), ["sleep", "90"]);
        assert_eq!(per_call.default_workdir(), None);
        assert_eq!(per_call.worktree("/w").default_workdir(), Some(WORKSPACE));
    }

    #[test]
    fn modes_parse() {
        assert_eq!("per-call".parse::<Mode>().unwrap(), Mode::PerCall);
        assert_eq!("warm".parse::<Mode>().unwrap(), Mode::Warm);
        assert!("cold".parse::<Mode>().is_err());
    }
}
