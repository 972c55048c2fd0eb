//! The engine connection: bollard over `DOCKER_HOST`, with the API version negotiated once.

use std::collections::HashMap;

use bollard::{API_DEFAULT_VERSION, Docker};
use execseam_core::Error;
use tokio::sync::OnceCell;

use crate::config::{DEFAULT_HOST, DockerConfig};
use crate::error::{Stage, engine, invalid_config};

/// Marks every container this adapter creates (value `true`).
pub const LABEL_MANAGED: &str = "io.execseam.managed";
/// The mode a container was created for (`warm` or `per-call`).
pub const LABEL_MODE: &str = "io.execseam.mode";

/// A bollard client, built and version-negotiated on first use (so a configuration naming an
/// engine that is down is accepted, and the first command reports `Unavailable`).
pub(crate) struct Client {
    pub(crate) host: String,
    timeout: u64,
    negotiated: OnceCell<Docker>,
}

impl Client {
    pub(crate) fn new(config: &DockerConfig) -> Result<Client, Error> {
        let host = config
            .host
            .clone()
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| DEFAULT_HOST.to_owned());
        let known = ["unix://", "tcp://", "http://", "https://"];
        if !known.iter().any(|p| host.starts_with(p)) {
            return Err(invalid_config(format!(
                "engine address {host:?}: expected unix://, tcp://, http:// or https://"
            )));
        }
        if needs_tls(&host) && !cfg!(feature = "tls") {
            return Err(invalid_config(format!(
                "engine address {host:?} needs TLS: build execseam-docker with the `tls` feature"
            )));
        }
        Ok(Client {
            host,
            timeout: config.request_timeout.as_secs().max(1),
            negotiated: OnceCell::new(),
        })
    }

    /// The client, after asking the engine which API version it speaks (a newer Docker refuses
    /// a client version above its own; podman 4.3 speaks 1.41).
    pub(crate) async fn get(&self) -> Result<&Docker, Error> {
        self.negotiated
            .get_or_try_init(|| async {
                self.connect()
                    .map_err(|e| engine("connect", Stage::Before, e))?
                    .negotiate_version()
                    .await
                    .map_err(|e| engine("version", Stage::Before, e))
            })
            .await
    }

    fn connect(&self) -> Result<Docker, bollard::errors::Error> {
        let (host, timeout) = (self.host.as_str(), self.timeout);
        if let Some(path) = host.strip_prefix("unix://") {
            return Docker::connect_with_unix(path, timeout, API_DEFAULT_VERSION);
        }
        if needs_tls(host) {
            return tls(host, timeout);
        }
        Docker::connect_with_http(host, timeout, API_DEFAULT_VERSION)
    }
}

fn needs_tls(host: &str) -> bool {
    host.starts_with("https://")
        || (host.starts_with("tcp://")
            && std::env::var_os("DOCKER_TLS_VERIFY").is_some_and(|v| !v.is_empty()))
}

/// TLS with the client certificate in `DOCKER_CERT_PATH` (default `~/.docker`), as the docker CLI.
#[cfg(feature = "tls")]
fn tls(host: &str, timeout: u64) -> Result<Docker, bollard::errors::Error> {
    let dir = std::env::var_os("DOCKER_CERT_PATH")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".docker")))
        .unwrap_or_default();
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
fn tls(host: &str, _timeout: u64) -> Result<Docker, bollard::errors::Error> {
    Err(bollard::errors::Error::UnsupportedURISchemeError {
        uri: host.to_owned(),
    })
}

/// The labels of a container created for `config`.
pub(crate) fn labels(config: &DockerConfig) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = config
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(LABEL_MANAGED.into(), "true".into());
    l.insert(LABEL_MODE.into(), config.mode.as_str().into());
    l
}

/// The list filter matching containers created for `config`.
pub(crate) fn label_filter(config: &DockerConfig) -> HashMap<String, Vec<String>> {
    let mut l: Vec<String> = labels(config)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    l.sort();
    HashMap::from([("label".to_owned(), l)])
}
