//! The engine connection: bollard over `DOCKER_HOST`, with the API version negotiated once.

use std::collections::HashMap;

use bollard::{API_DEFAULT_VERSION, Docker};
use execseam_core::Error;
use tokio::sync::OnceCell;

use crate::config::{DockerConfig, config_error};
use crate::error::{Stage, engine};

/// Marks every container this adapter creates (value `true`).
pub const LABEL_MANAGED: &str = "io.execseam.managed";
/// The mode a container was created for (`warm` or `per-call`).
pub const LABEL_MODE: &str = "io.execseam.mode";
/// Per call: the sandbox (handle) id a container serves, so destroying the handle can remove the
/// containers of its running commands.
pub const LABEL_SANDBOX: &str = "io.execseam.sandbox";

/// A bollard client, built and version-negotiated on first use (so a configuration naming an
/// engine that is down is accepted, and the first request reports `Unavailable`).
pub(crate) struct Client {
    pub(crate) host: String,
    tls: Option<std::path::PathBuf>,
    timeout: u64,
    negotiated: OnceCell<Docker>,
}

impl Client {
    pub(crate) fn new(config: &DockerConfig) -> Result<Client, Error> {
        let host = config.host.clone();
        let tls = host.starts_with("https://") || (host.starts_with("tcp://") && config.tls_verify);
        if tls && !cfg!(feature = "tls") {
            return Err(config_error(format!(
                "engine address {host:?} needs TLS: build execseam-docker with the `tls` feature"
            )));
        }
        let cert_dir = || {
            config
                .cert_path
                .clone()
                .map(std::path::PathBuf::from)
                .or_else(|| std::env::home_dir().map(|h| h.join(".docker")))
                .unwrap_or_default()
        };
        Ok(Client {
            host,
            tls: tls.then(cert_dir),
            timeout: config.request_timeout.as_secs().max(1),
            negotiated: OnceCell::new(),
        })
    }

    /// The client, after asking the engine which API version it speaks (a newer Docker refuses
    /// a client version above its own; podman 4.3 speaks 1.41).
    pub(crate) async fn get(&self) -> Result<&Docker, Error> {
        self.negotiated
            .get_or_try_init(|| async {
                let docker = self
                    .connect()
                    .map_err(|e| engine("connect", Stage::Idempotent, e))?;
                // bollard's own timeout ends at the answer's head; its body is read unbounded.
                bounded(self.timeout(), docker.negotiate_version())
                    .await
                    .map_err(|e| engine("version", Stage::Idempotent, e))
            })
            .await
    }

    /// The per-request timeout.
    pub(crate) fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout)
    }

    fn connect(&self) -> Result<Docker, bollard::errors::Error> {
        let (host, timeout) = (self.host.as_str(), self.timeout);
        if let Some(path) = host.strip_prefix("unix://") {
            return Docker::connect_with_unix(path, timeout, API_DEFAULT_VERSION);
        }
        if let Some(dir) = &self.tls {
            return tls(host, dir, timeout);
        }
        Docker::connect_with_http(host, timeout, API_DEFAULT_VERSION)
    }
}

/// TLS with the client certificate in `dir`, as the docker CLI does.
#[cfg(feature = "tls")]
fn tls(host: &str, dir: &std::path::Path, timeout: u64) -> Result<Docker, bollard::errors::Error> {
    Docker::connect_with_ssl(
        host,
        &dir.join("key.pem"),
        &dir.join("cert.pem"),
        &dir.join("ca.pem"),
        timeout,
        API_DEFAULT_VERSION,
    )
}

#[cfg(not(feature = "tls"))]
fn tls(
    host: &str,
    _dir: &std::path::Path,
    _timeout: u64,
) -> Result<Docker, bollard::errors::Error> {
    Err(bollard::errors::Error::UnsupportedURISchemeError {
        uri: host.to_owned(),
    })
}

/// The labels of a container created for `config`: its own, the adapter's, and `extra`.
pub(crate) fn labels<'a>(
    config: &'a DockerConfig,
    extra: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = config
        .labels
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(LABEL_MANAGED.into(), "true".into());
    l.insert(LABEL_MODE.into(), config.mode.as_str().into());
    l
}

/// The list filter for containers carrying every label of `labels`.
pub(crate) fn label_filter(labels: &HashMap<String, String>) -> HashMap<String, Vec<String>> {
    let mut l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    l.sort();
    HashMap::from([("label".to_owned(), l)])
}

/// `request` bounded by `timeout` as a whole, its answer's body included: bollard's own timeout
/// covers the request up to the answer's head, so a stalled or trickling body would hang.
pub(crate) async fn bounded<T>(
    timeout: std::time::Duration,
    request: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<T, bollard::errors::Error> {
    tokio::time::timeout(timeout, request)
        .await
        .unwrap_or(Err(bollard::errors::Error::RequestTimeoutError))
}
