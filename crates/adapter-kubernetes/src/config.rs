//! Configuration: where the cluster is (kubeconfig, in-cluster, or explicit), which namespace, and
//! how sandboxes are made (a `SandboxClaim` on a warm pool, a `Sandbox` from a template, or a
//! plain Pod). Nothing here does I/O: the kubeconfig, the service-account files and the CA are
//! read on the first call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use execseam_adapter_kit::vars::{Vars, config_error};
use execseam_core::Error;
use secrecy::SecretString;

use crate::{PROVIDER, VARS};

/// How sandboxes are created (`EXECSEAM_KUBERNETES_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// A `SandboxClaim` (`extensions.agents.x-k8s.io/v1beta1`) on a warm pool: the
    /// agent-sandbox controller binds a warm Sandbox or starts a cold one from the pool's
    /// template. The sandbox id is the claim's name.
    #[default]
    Claim,
    /// A `Sandbox` (`agents.x-k8s.io/v1beta1`) whose pod template is copied from a
    /// `SandboxTemplate`, as the claim controller's cold path does. The id is the Sandbox's name.
    Sandbox,
    /// A plain Pod from a pod template (a manifest file) or an image: for clusters without the
    /// agent-sandbox CRDs. The id is the Pod's name.
    Pod,
}

impl Mode {
    /// The word `EXECSEAM_KUBERNETES_MODE` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Claim => "claim",
            Mode::Sandbox => "sandbox",
            Mode::Pod => "pod",
        }
    }
}

/// Where terminals run (`EXECSEAM_KUBERNETES_TERMINAL`): the kit's choice, default the
/// recorder; `attached`/`auto` use the API server's `tty=true` exec with its resize channel.
pub use execseam_adapter_kit::attached::TerminalMode;

/// How commands reach the pod (`EXECSEAM_KUBERNETES_EXEC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExecPath {
    /// `pods/exec` through the API server (any template).
    #[default]
    PodsExec,
    /// agent-sandbox's `sandboxd` `ProcessService` (`Start`) on port 9090, over a
    /// `pods/portforward`: for templates whose pod runs sandboxd.
    Sandboxd,
}

/// Where the cluster and its credentials come from.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// kube's inference: `KUBECONFIG` or `~/.kube/config` (its current context, or this one),
    /// else the in-cluster service account.
    Infer {
        kubeconfig: Option<PathBuf>,
        context: Option<String>,
    },
    /// An explicit API server URL, bearer token and CA.
    Explicit {
        server: String,
        token: Option<SecretString>,
        ca_cert: Option<PathBuf>,
        insecure: bool,
    },
}

/// Configuration of [`KubernetesProvider`](crate::KubernetesProvider). Built with
/// [`KubernetesConfig::new`] and the setters, or [`KubernetesConfig::from_env`]; `Debug` never
/// prints the token.
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    pub(crate) source: Source,
    pub(crate) namespace: Option<String>,
    pub(crate) mode: Mode,
    pub(crate) warm_pool: Option<String>,
    pub(crate) template: Option<String>,
    pub(crate) pod_template: Option<PathBuf>,
    pub(crate) image: Option<String>,
    pub(crate) container: Option<String>,
    pub(crate) ready_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) temp_dir: String,
    pub(crate) remote_kill: bool,
    pub(crate) terminal: TerminalMode,
    pub(crate) exec_path: ExecPath,
    pub(crate) labels: BTreeMap<String, String>,
}

impl Default for KubernetesConfig {
    fn default() -> KubernetesConfig {
        KubernetesConfig::new()
    }
}

impl KubernetesConfig {
    /// kube's inferred cluster (kubeconfig, then in-cluster), claim mode, every default. A warm
    /// pool must still be named ([`warm_pool`](Self::warm_pool)) before the provider is built.
    pub fn new() -> KubernetesConfig {
        KubernetesConfig {
            source: Source::Infer {
                kubeconfig: None,
                context: None,
            },
            namespace: None,
            mode: Mode::Claim,
            warm_pool: None,
            template: None,
            pod_template: None,
            image: None,
            container: None,
            ready_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            temp_dir: "/tmp".into(),
            remote_kill: true,
            terminal: TerminalMode::Recorder,
            exec_path: ExecPath::PodsExec,
            labels: BTreeMap::new(),
        }
    }

    /// Reads the process environment (see [`VARS`](crate::VARS)).
    pub fn from_env() -> Result<KubernetesConfig, Error> {
        KubernetesConfig::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads the variables in [`VARS`](crate::VARS) as `get` gives them; an unset or empty one
    /// keeps the default. A missing setting the mode needs, or a malformed value, is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<KubernetesConfig, Error> {
        let v = Vars::new(PROVIDER, VARS, &get);
        let mut c = KubernetesConfig::new();
        if let Some(server) = v.text("EXECSEAM_KUBERNETES_SERVER") {
            c.source = Source::Explicit {
                server: server.trim().to_owned(),
                token: v.secret("EXECSEAM_KUBERNETES_TOKEN"),
                ca_cert: v.text("EXECSEAM_KUBERNETES_CA_CERT").map(PathBuf::from),
                insecure: v.flag("EXECSEAM_KUBERNETES_INSECURE")?.unwrap_or(false),
            };
        } else {
            for name in [
                "EXECSEAM_KUBERNETES_TOKEN",
                "EXECSEAM_KUBERNETES_CA_CERT",
                "EXECSEAM_KUBERNETES_INSECURE",
            ] {
                if v.get(name).is_some() {
                    return Err(v.error(format!(
                        "{name} is set without EXECSEAM_KUBERNETES_SERVER (it only applies to an explicit server)"
                    )));
                }
            }
            c.source = Source::Infer {
                kubeconfig: v.text("EXECSEAM_KUBERNETES_KUBECONFIG").map(PathBuf::from),
                context: v.text("EXECSEAM_KUBERNETES_CONTEXT"),
            };
        }
        c.namespace = v.text("EXECSEAM_KUBERNETES_NAMESPACE");
        if let Some(mode) = v.choice(
            "EXECSEAM_KUBERNETES_MODE",
            &[
                ("claim", Mode::Claim),
                ("sandbox", Mode::Sandbox),
                ("pod", Mode::Pod),
            ],
        )? {
            c.mode = mode;
        }
        c.warm_pool = v.text("EXECSEAM_KUBERNETES_WARM_POOL");
        c.template = v.text("EXECSEAM_KUBERNETES_TEMPLATE");
        c.pod_template = v
            .text("EXECSEAM_KUBERNETES_POD_TEMPLATE")
            .map(PathBuf::from);
        c.image = v.text("EXECSEAM_KUBERNETES_IMAGE");
        c.container = v.text("EXECSEAM_KUBERNETES_CONTAINER");
        if let Some(t) = v.seconds("EXECSEAM_KUBERNETES_READY_TIMEOUT")? {
            c.ready_timeout = t;
        }
        if let Some(t) = v.seconds("EXECSEAM_KUBERNETES_REQUEST_TIMEOUT")? {
            c.request_timeout = t;
        }
        if let Some(t) = v.seconds("EXECSEAM_KUBERNETES_IDLE_TIMEOUT")? {
            c.idle_timeout = t;
        }
        if let Some(d) = v.text("EXECSEAM_KUBERNETES_TEMP_DIR") {
            c.temp_dir = d;
        }
        if let Some(k) = v.flag("EXECSEAM_KUBERNETES_REMOTE_KILL")? {
            c.remote_kill = k;
        }
        if let Some(t) = TerminalMode::from_vars(&v, "EXECSEAM_KUBERNETES_TERMINAL")? {
            c.terminal = t;
        }
        if let Some(p) = v.choice(
            "EXECSEAM_KUBERNETES_EXEC",
            &[
                ("pods-exec", ExecPath::PodsExec),
                ("sandboxd", ExecPath::Sandboxd),
            ],
        )? {
            c.exec_path = p;
        }
        c.validate()?;
        Ok(c)
    }

    /// An explicit API server (`https://…` or `http://…`), instead of kube's inference.
    #[must_use]
    pub fn server(mut self, url: impl Into<String>) -> Self {
        let (token, ca_cert, insecure) = match self.source {
            Source::Explicit {
                token,
                ca_cert,
                insecure,
                ..
            } => (token, ca_cert, insecure),
            Source::Infer { .. } => (None, None, false),
        };
        self.source = Source::Explicit {
            server: url.into(),
            token,
            ca_cert,
            insecure,
        };
        self
    }

    /// The bearer token for an explicit [`server`](Self::server).
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        if let Source::Explicit { token: t, .. } = &mut self.source {
            *t = Some(SecretString::from(token.into()));
        }
        self
    }

    /// A PEM file with the CA of an explicit [`server`](Self::server).
    #[must_use]
    pub fn ca_cert(mut self, path: impl Into<PathBuf>) -> Self {
        if let Source::Explicit { ca_cert, .. } = &mut self.source {
            *ca_cert = Some(path.into());
        }
        self
    }

    /// Skips TLS verification of an explicit [`server`](Self::server) (for test clusters).
    #[must_use]
    pub fn insecure(mut self, on: bool) -> Self {
        if let Source::Explicit { insecure, .. } = &mut self.source {
            *insecure = on;
        }
        self
    }

    /// This kubeconfig file instead of `KUBECONFIG` / `~/.kube/config`.
    #[must_use]
    pub fn kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        let context = match self.source {
            Source::Infer { context, .. } => context,
            Source::Explicit { .. } => None,
        };
        self.source = Source::Infer {
            kubeconfig: Some(path.into()),
            context,
        };
        self
    }

    /// This kubeconfig context instead of the current one.
    #[must_use]
    pub fn context(mut self, name: impl Into<String>) -> Self {
        if let Source::Infer { context, .. } = &mut self.source {
            *context = Some(name.into());
        }
        self
    }

    execseam_adapter_kit::setters! {
        /// The namespace of the claims, sandboxes and pods (default: the context's, else
        /// `default`).
        namespace: some into String,
        /// How sandboxes are created.
        mode: Mode,
        /// The `SandboxWarmPool` claims name (claim mode).
        warm_pool: some into String,
        /// The `SandboxTemplate` a Sandbox is made from (sandbox mode).
        template: some into String,
        /// A Pod manifest (YAML or JSON) new pods are made from (pod mode).
        pod_template: some into PathBuf,
        /// The image of new pods (pod mode; overrides the template's container image).
        image: some into String,
        /// The container commands run in (default: the pod's only container; a pod with several
        /// needs one named).
        container: some into String,
        /// How long create (and connect to a sandbox still starting) waits for `Ready`.
        ready_timeout: Duration,
        /// The deadline of one API request (an exec's upgrade included; not the command's run).
        request_timeout: Duration,
        /// How long an exec's socket may stay silent, heartbeat pongs included, before the
        /// connection counts as dead (`Timeout(Request)`, `Unsafe`). A ping goes out every third of
        /// it, so a command that prints nothing for hours is fine.
        idle_timeout: Duration,
        /// Where stdin is stored in the container when the API server only speaks
        /// `v4.channel.k8s.io` (which cannot close stdin).
        temp_dir: into String,
        /// Tag every command (`env EXECSEAM_EXEC=<tag> argv…`) so that an abandoned one is killed
        /// with its children by a second exec (default on; needs `env`, `sh`, `tr`, `grep`, `kill`
        /// in the image). Off: argv goes to the container exactly as given, and an abandoned
        /// command keeps running (the API server does not kill it when its stream closes).
        remote_kill: bool,
        /// Where terminals run (default [`TerminalMode::Recorder`]).
        terminal: TerminalMode,
        /// How commands reach the pod (default [`ExecPath::PodsExec`]).
        exec_path: ExecPath,
    }

    /// A label on every sandbox this provider creates.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The mode.
    pub fn get_mode(&self) -> Mode {
        self.mode
    }

    /// Checks what can be checked without I/O.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let err = |m: String| Err(config_error(PROVIDER, m));
        match self.mode {
            Mode::Claim if self.warm_pool.is_none() => {
                return err("EXECSEAM_KUBERNETES_WARM_POOL is not set (claim mode claims a SandboxWarmPool)".into());
            }
            Mode::Sandbox if self.template.is_none() => {
                return err("EXECSEAM_KUBERNETES_TEMPLATE is not set (sandbox mode copies a SandboxTemplate)".into());
            }
            Mode::Pod if self.pod_template.is_none() && self.image.is_none() => {
                return err(
                    "pod mode needs EXECSEAM_KUBERNETES_POD_TEMPLATE or EXECSEAM_KUBERNETES_IMAGE"
                        .into(),
                );
            }
            _ => {}
        }
        if let Source::Explicit { server, .. } = &self.source {
            let ok = (server.starts_with("https://") || server.starts_with("http://"))
                && server
                    .parse::<http::Uri>()
                    .is_ok_and(|u| u.host().is_some());
            if !ok {
                return err(format!(
                    "EXECSEAM_KUBERNETES_SERVER {server:?} is not an http(s) URL"
                ));
            }
        }
        for (what, name) in [
            ("namespace", &self.namespace),
            ("warm pool", &self.warm_pool),
            ("template", &self.template),
        ] {
            if let Some(n) = name
                && !crate::names::is_dns_label(n)
            {
                return err(format!(
                    "{what} {n:?} is not a Kubernetes name (a DNS label: lower-case letters, digits, '-', at most 63)"
                ));
            }
        }
        if let Some(c) = &self.container
            && !crate::names::is_dns_label(c)
        {
            return err(format!("container {c:?} is not a container name"));
        }
        if !self.temp_dir.starts_with('/') {
            return err(format!(
                "EXECSEAM_KUBERNETES_TEMP_DIR {:?} is not an absolute path",
                self.temp_dir
            ));
        }
        if self.ready_timeout.is_zero()
            || self.request_timeout.is_zero()
            || self.idle_timeout.is_zero()
        {
            return err("a timeout of zero".into());
        }
        for (k, v) in &self.labels {
            crate::names::check_label(k, v).map_err(|m| config_error(PROVIDER, m))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::ErrorKind;

    fn from(pairs: &[(&str, &str)]) -> Result<KubernetesConfig, Error> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        KubernetesConfig::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn each_mode_needs_its_source_of_sandboxes() {
        for (pairs, want) in [
            (vec![], "EXECSEAM_KUBERNETES_WARM_POOL is not set"),
            (
                vec![("EXECSEAM_KUBERNETES_MODE", "sandbox")],
                "EXECSEAM_KUBERNETES_TEMPLATE is not set",
            ),
            (vec![("EXECSEAM_KUBERNETES_MODE", "pod")], "pod mode needs"),
            (
                vec![("EXECSEAM_KUBERNETES_MODE", "vm")],
                "want one of claim, sandbox, pod",
            ),
            (
                vec![("EXECSEAM_KUBERNETES_EXEC", "grpc")],
                "want one of pods-exec, sandboxd",
            ),
        ] {
            let e = from(&pairs).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(e.message().contains(want), "{e}");
        }
        let c = from(&[("EXECSEAM_KUBERNETES_WARM_POOL", "python-sandbox-pool")]).unwrap();
        assert_eq!(c.mode, Mode::Claim);
        let c = from(&[
            ("EXECSEAM_KUBERNETES_MODE", "pod"),
            ("EXECSEAM_KUBERNETES_IMAGE", "busybox:1.36"),
        ])
        .unwrap();
        assert_eq!(c.mode, Mode::Pod);
    }

    #[test]
    fn bad_values_are_invalid_config_and_the_token_stays_out() {
        for pairs in [
            vec![("EXECSEAM_KUBERNETES_WARM_POOL", "Pool_1")],
            vec![
                ("EXECSEAM_KUBERNETES_WARM_POOL", "p"),
                ("EXECSEAM_KUBERNETES_SERVER", "ftp://x"),
            ],
            vec![
                ("EXECSEAM_KUBERNETES_WARM_POOL", "p"),
                ("EXECSEAM_KUBERNETES_TOKEN", "hunter2"),
            ],
            vec![
                ("EXECSEAM_KUBERNETES_WARM_POOL", "p"),
                ("EXECSEAM_KUBERNETES_TEMP_DIR", "tmp"),
            ],
            vec![
                ("EXECSEAM_KUBERNETES_WARM_POOL", "p"),
                ("EXECSEAM_KUBERNETES_READY_TIMEOUT", "soon"),
            ],
        ] {
            let e = from(&pairs).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{pairs:?}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
        let c = from(&[
            ("EXECSEAM_KUBERNETES_WARM_POOL", "p"),
            ("EXECSEAM_KUBERNETES_SERVER", "https://10.0.0.1:6443"),
            ("EXECSEAM_KUBERNETES_TOKEN", "hunter2"),
        ])
        .unwrap();
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("[REDACTED]"), "{debug}");
    }
}
