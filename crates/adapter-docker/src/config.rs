//! [`DockerConfig`]: the engine, the image and the containers' settings.

use execseam_adapter_kit::Adapter as _;
use execseam_adapter_kit::vars::{self, Vars};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use execseam_core::Error;
use secrecy::{ExposeSecret, SecretString};

use crate::PROVIDER;

/// The engine when the configuration names none (Docker's default socket; podman's rootful
/// `podman.socket` listens at `/run/podman/podman.sock`).
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// Where the worktree is mounted in the container; the default workdir when one is mounted.
pub const WORKSPACE: &str = "/workspace";

/// How commands reach containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One long-lived container per sandbox; every command is a Docker exec in it, so files and
    /// processes persist between commands.
    Warm,
    /// A fresh container per command, removed before its result is returned: only the
    /// bind-mounted worktree survives between commands.
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
            other => Err(vars::config_error(
                PROVIDER,
                format!("mode {other:?}: expected `warm` or `per-call`"),
            )),
        }
    }
}

/// One resource limit, as `docker run --ulimit name=soft:hard` takes it.
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
    /// `name=soft:hard` or `name=both`.
    fn from_str(s: &str) -> Result<Ulimit, Error> {
        let bad = || vars::config_error(PROVIDER, format!("ulimit {s:?}: expected name=soft:hard"));
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

/// Parses `name=soft:hard,…`.
pub(crate) fn parse_ulimits(s: &str) -> Result<Vec<Ulimit>, Error> {
    s.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::parse)
        .collect()
}

/// The default of [`DockerConfig::max_answer_bytes`]: 16 MiB (a container list of a few
/// thousand containers; podman's `/version` is about 1 KiB).
pub const DEFAULT_MAX_ANSWER: usize = 16 << 20;

/// The engine, the image, and how the adapter's containers are made. `Debug` never shows env
/// values.
#[derive(Clone, Debug)]
pub struct DockerConfig {
    pub(crate) host: String,
    pub(crate) tls_verify: bool,
    pub(crate) cert_path: Option<String>,
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
    /// Container ports published on the host (from [`SandboxSpec::with_port`](execseam_core::SandboxSpec::with_port)).
    pub(crate) ports: Vec<u16>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) env: BTreeMap<String, SecretString>,
    pub(crate) keepalive: Option<Vec<String>>,
    pub(crate) lifetime: Option<Duration>,
    pub(crate) worktree: Option<String>,
    pub(crate) temp_dir: String,
    pub(crate) request_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_answer: usize,
    pub(crate) per_call_lifetime: Duration,
    pub(crate) destroy_on_drop: bool,
}

impl DockerConfig {
    /// Containers from `image` (which must be on the engine already: the adapter never pulls),
    /// in [`Mode::Warm`], with an init and no network, as the image's user, on [`DEFAULT_HOST`].
    pub fn new(image: impl Into<String>) -> DockerConfig {
        DockerConfig {
            host: DEFAULT_HOST.to_owned(),
            tls_verify: false,
            cert_path: None,
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
            ports: Vec::new(),
            labels: BTreeMap::new(),
            env: BTreeMap::new(),
            keepalive: None,
            lifetime: None,
            worktree: None,
            temp_dir: "/tmp".to_owned(),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(30),
            max_answer: DEFAULT_MAX_ANSWER,
            per_call_lifetime: Duration::from_secs(3600),
            destroy_on_drop: true,
        }
    }

    /// the variables in [`VARS`](crate::VARS) over the process environment.
    pub fn from_env() -> Result<DockerConfig, Error> {
        crate::Docker::config_from(&vars::env)
    }

    /// Reads the variables in [`VARS`](crate::VARS) as `vars` gives them (an unset or
    /// empty one keeps the default): `DOCKER_HOST`, `DOCKER_TLS_VERIFY`, `DOCKER_CERT_PATH` (as the
    /// docker CLI reads them); `EXECSEAM_DOCKER_IMAGE` (required), `EXECSEAM_DOCKER_MODE`
    /// (`warm`|`per-call`), `EXECSEAM_DOCKER_WORKTREE`, `EXECSEAM_DOCKER_RUNTIME`,
    /// `EXECSEAM_DOCKER_ULIMITS` (`name=soft:hard,…`), `EXECSEAM_DOCKER_USER`,
    /// `EXECSEAM_DOCKER_NETWORK`, `EXECSEAM_DOCKER_MEMORY` (bytes). A missing image or a bad value
    /// is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<DockerConfig, Error> {
        let mut c = DockerConfig::new(vars.required(
            "EXECSEAM_DOCKER_IMAGE",
            "the image commands run in; the adapter never pulls",
        )?);
        if let Some(h) = vars.text("DOCKER_HOST") {
            c.host = h;
        }
        // As the docker CLI: any value turns verification on.
        c.tls_verify = vars.text("DOCKER_TLS_VERIFY").is_some();
        c.cert_path = vars.text("DOCKER_CERT_PATH");
        if let Some(m) = vars.text("EXECSEAM_DOCKER_MODE") {
            c.mode = m.parse()?;
        }
        c.worktree = vars.text("EXECSEAM_DOCKER_WORKTREE");
        c.runtime = vars.text("EXECSEAM_DOCKER_RUNTIME");
        if let Some(u) = vars.text("EXECSEAM_DOCKER_ULIMITS") {
            c.ulimits = parse_ulimits(&u)?;
        }
        c.user = vars.text("EXECSEAM_DOCKER_USER");
        if let Some(n) = vars.text("EXECSEAM_DOCKER_NETWORK") {
            c.network = n;
        }
        c.memory = vars.number("EXECSEAM_DOCKER_MEMORY", "a number of bytes")?;
        c.validate()?;
        Ok(c)
    }

    execseam_adapter_kit::setters! {
        /// The engine: `unix:///path`, `tcp://host:port`, `http://…`, or `https://…` (TLS needs the
        /// `tls` feature). Default [`DEFAULT_HOST`].
        host: into String,
        /// TLS to a `tcp://` engine, with the client certificate in [`cert_path`](Self::cert_path)
        /// (`DOCKER_TLS_VERIFY`).
        tls_verify: bool,
        /// The directory holding `ca.pem`, `cert.pem` and `key.pem` (`DOCKER_CERT_PATH`; default
        /// `~/.docker`).
        cert_path: some into String,
        /// The image containers are created from (overridden by a spec's image).
        image: into String,
        /// [`Mode::Warm`] (default) or [`Mode::PerCall`].
        mode: Mode,
        /// The user commands run as (`uid`, `uid:gid`, or a name in the image); default: the
        /// image's.
        user: some into String,
        /// Whether PID 1 is an init (default true): without one the keepalive is PID 1, ignores
        /// SIGTERM, and a stop waits for the engine's timeout.
        init: bool,
        /// The OCI runtime (`HostConfig.Runtime`), e.g. `runc`; default: the engine's.
        runtime: some into String,
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

    execseam_adapter_kit::setters! {
        /// A memory limit in bytes, with no swap beyond it.
        memory: some i64,
        /// A CPU limit in 10⁻⁹ CPUs (`HostConfig.NanoCpus`; `1_500_000_000` is 1.5 CPUs).
        nano_cpus: some i64,
        /// The most processes a container may hold (`HostConfig.PidsLimit`).
        pids_limit: some i64,
        /// The network mode (`HostConfig.NetworkMode`); default `none`: no network unless asked
        /// (`bridge` on Docker, `slirp4netns` or `pasta` for rootless podman).
        network: into String,
    }

    /// A label on every container created, which also scopes [`list`](crate::DockerProvider::list).
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// An environment variable of every container created (a command's own env overrides it).
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env
            .insert(key.into(), SecretString::from(value.into()));
        self
    }

    /// The container's main process, which only keeps it alive (default `sleep infinity`, or
    /// `sleep <seconds>` with a lifetime or per call); the image must have it.
    #[must_use]
    pub fn keepalive<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keepalive = Some(argv.into_iter().map(Into::into).collect());
        self
    }

    execseam_adapter_kit::setters! {
        /// How long a warm container lives: its keepalive is `sleep <seconds>` and the engine
        /// removes it when that ends (default: until destroyed).
        lifetime: some Duration,
        /// A host directory (absolute) bind-mounted read-write at [`WORKSPACE`], which becomes the
        /// default workdir. Per call it is the only thing that survives between commands.
        worktree: some into String,
        /// Where stdin is stored before the command reads it (default `/tmp`: absolute, writable by
        /// the commands' user).
        temp_dir: into String,
    }

    /// The most bytes one engine answer may have (head and body, [`DEFAULT_MAX_ANSWER`] by
    /// default): bollard reads a whole JSON body before decoding it, so the adapter's connection
    /// fails a read past this with `Protocol`, before the memory is spent. An exec's attached
    /// output stream is not an answer of this kind and is not capped here.
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer = bytes.max(1);
        self
    }

    execseam_adapter_kit::setters! {
        /// How long one engine request may take to answer (default 120 s); output streams are not
        /// bounded by it (that is the host's deadline layer).
        request_timeout: Duration,
        /// How long an exec's output stream may stay silent before the engine is asked whether the
        /// exec still runs (default 30 s): while it runs the silence is the command's and the wait
        /// goes on; once it has ended, a stream that still neither ends nor speaks (a stalled
        /// connection) fails with `Timeout(Request)` (`Retry::Unsafe`), never a quiet `Ok`.
        idle_timeout: Duration,
        /// The longest a per-call container can live (default 1 h): its keepalive ends then and the
        /// engine removes it, even if this process died before removing it.
        per_call_lifetime: Duration,
        /// Whether dropping the last handle of an owned, unclosed sandbox removes its container
        /// (default true; best effort, on the running tokio runtime).
        destroy_on_drop: bool,
    }

    /// The image name.
    pub fn image_name(&self) -> &str {
        &self.image
    }

    /// The mode.
    pub fn current_mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn keepalive_argv(&self) -> Vec<String> {
        let sleep = |d: Duration| vec!["sleep".into(), d.as_secs().max(1).to_string()];
        match (&self.keepalive, self.mode, self.lifetime) {
            (Some(argv), _, _) => argv.clone(),
            (None, Mode::PerCall, _) => sleep(self.per_call_lifetime),
            (None, Mode::Warm, Some(l)) => sleep(l),
            (None, Mode::Warm, None) => vec!["sleep".into(), "infinity".into()],
        }
    }

    /// The environment a command runs with: the container-wide env, then `command`'s own over
    /// it (the values exposed: they travel on the exec's stdin, never in an engine request).
    pub(crate) fn env_for(&self, command: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut entries: BTreeMap<String, String> = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.expose_secret().to_owned()))
            .collect();
        entries.extend(command.iter().map(|(k, v)| (k.clone(), v.clone())));
        entries
    }

    /// The engine removes the container when its keepalive ends.
    pub(crate) fn auto_remove(&self) -> bool {
        self.mode == Mode::PerCall || self.lifetime.is_some()
    }

    /// The workdir of a command that names none.
    pub(crate) fn default_workdir(&self) -> Option<&str> {
        self.worktree.as_ref().map(|_| WORKSPACE)
    }

    /// Checks what can be checked before any request.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.image.trim().is_empty() {
            return Err(vars::config_error(PROVIDER, "the image name is empty"));
        }
        if !["unix://", "tcp://", "http://", "https://"]
            .iter()
            .any(|p| self.host.starts_with(p))
        {
            return Err(vars::config_error(
                PROVIDER,
                format!(
                    "engine address {:?}: expected unix://, tcp://, http:// or https://",
                    self.host
                ),
            ));
        }
        if let Some(argv) = &self.keepalive
            && argv.first().is_none_or(|p| p.is_empty())
        {
            return Err(vars::config_error(
                PROVIDER,
                "the keepalive command is empty",
            ));
        }
        if let Some(w) = &self.worktree
            && (!w.starts_with('/') || w.contains(':'))
        {
            return Err(vars::config_error(
                PROVIDER,
                format!("worktree {w:?}: expected an absolute host path without `:`"),
            ));
        }
        if !self.temp_dir.starts_with('/') {
            return Err(vars::config_error(
                PROVIDER,
                format!("temp dir {:?}: expected an absolute path", self.temp_dir),
            ));
        }
        for u in &self.ulimits {
            if u.name.is_empty() || u.soft > u.hard {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("ulimit {u:?}: soft above hard"),
                ));
            }
        }
        for (k, v) in &self.labels {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("label key {k:?} is not valid"),
                ));
            }
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains(['=', '\0']) || v.expose_secret().contains('\0') {
                return Err(vars::config_error(
                    PROVIDER,
                    format!("env key {k:?} is not valid"),
                ));
            }
        }
        if self.network.is_empty() {
            return Err(vars::config_error(PROVIDER, "the network mode is empty"));
        }
        if !self.ports.is_empty() && self.network == "none" {
            return Err(vars::config_error(
                PROVIDER,
                "a published port needs a network: set the network (EXECSEAM_DOCKER_NETWORK, or the option network=bridge)",
            ));
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
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad}");
        }
    }

    #[test]
    fn bad_configuration_is_rejected_before_any_request() {
        let cases = [
            DockerConfig::new(" "),
            DockerConfig::new("img").host("/var/run/docker.sock"),
            DockerConfig::new("img").worktree("relative/dir"),
            DockerConfig::new("img").worktree("/a:b"),
            DockerConfig::new("img").keepalive(Vec::<String>::new()),
            DockerConfig::new("img").label("a=b", "c"),
            DockerConfig::new("img").env("", "c"),
            DockerConfig::new("img").ulimit("nofile", 2, 1),
            DockerConfig::new("img").network(""),
            DockerConfig::new("img").temp_dir("tmp"),
        ];
        for c in cases {
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{c:?}");
        }
        DockerConfig::new("img").worktree("/w").validate().unwrap();
    }

    #[test]
    fn from_vars_reads_every_variable() {
        let vars = |k: &str| {
            Some(
                match k {
                    "DOCKER_HOST" => "tcp://h:2375",
                    "EXECSEAM_DOCKER_IMAGE" => "img",
                    "EXECSEAM_DOCKER_MODE" => "per-call",
                    "EXECSEAM_DOCKER_WORKTREE" => "/w",
                    "EXECSEAM_DOCKER_RUNTIME" => "runc",
                    "EXECSEAM_DOCKER_ULIMITS" => "nofile=1:2, nproc=3",
                    "EXECSEAM_DOCKER_USER" => "1000",
                    "EXECSEAM_DOCKER_NETWORK" => "bridge",
                    "EXECSEAM_DOCKER_MEMORY" => "1048576",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let c = crate::Docker::config_from(&vars).unwrap();
        assert_eq!(c.host, "tcp://h:2375");
        assert_eq!(c.mode, Mode::PerCall);
        assert_eq!(c.worktree.as_deref(), Some("/w"));
        assert_eq!(c.runtime.as_deref(), Some("runc"));
        assert_eq!(c.ulimits.len(), 2);
        assert_eq!(c.user.as_deref(), Some("1000"));
        assert_eq!(c.network, "bridge");
        assert_eq!(c.memory, Some(1 << 20));
        for var in crate::VARS.iter().map(|v| v.name) {
            assert!(
                ["DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"].contains(&var) || vars(var).is_some(),
                "{var} is in VARS but not exercised here"
            );
        }
        let e = crate::Docker::config_from(&|_| None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let e = crate::Docker::config_from(&|k| {
            (k == "EXECSEAM_DOCKER_IMAGE" || k == "EXECSEAM_DOCKER_MEMORY").then(|| "x".to_owned())
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn keepalive_follows_the_mode_and_lifetime() {
        assert_eq!(
            DockerConfig::new("i").keepalive_argv(),
            ["sleep", "infinity"]
        );
        let c = DockerConfig::new("i").lifetime(Duration::from_secs(30));
        assert_eq!(c.keepalive_argv(), ["sleep", "30"]);
        assert!(c.auto_remove());
        let per_call = DockerConfig::new("i")
            .mode(Mode::PerCall)
            .per_call_lifetime(Duration::from_secs(90));
        assert_eq!(per_call.keepalive_argv(), ["sleep", "90"]);
        assert_eq!(per_call.default_workdir(), None);
        assert_eq!(per_call.worktree("/w").default_workdir(), Some(WORKSPACE));
        assert!(!DockerConfig::new("i").auto_remove());
    }

    #[test]
    fn debug_never_shows_env_values() {
        let c = DockerConfig::new("img").env("TOKEN", "s3cr3t-value");
        let shown = format!("{c:?}");
        assert!(
            shown.contains("TOKEN") && !shown.contains("s3cr3t-value"),
            "{shown}"
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("per-call".parse::<Mode>().unwrap(), Mode::PerCall);
        assert_eq!("warm".parse::<Mode>().unwrap(), Mode::Warm);
        assert!("cold".parse::<Mode>().is_err());
    }
}
