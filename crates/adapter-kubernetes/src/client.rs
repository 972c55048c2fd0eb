//! The API client: kube's `Config` (kubeconfig, in-cluster, exec plugins, client certificates)
//! and its tower layers (base URI, auth, extra headers) over hyper with rustls, built on first
//! use; and one `send` that every request goes through, with a deadline, a bounded body and one
//! error classification.
//!
//! kube's default stack is not used, for two of its layers:
//!
//! - its `RetryLayer` retries 429/503/504 up to 15 times for any method, POST included: a 504 on
//!   `POST sandboxclaims` may have created the claim, and a retry would make a second sandbox.
//!   Retries are the caller's, from the retry class of the error.
//! - its `TraceLayer` puts the full URI in a DEBUG span: an exec's URI holds every argv element.
//!   Here one span per operation names the operation and the namespace, never the URI.
//!
//! Bodies are read with the kit's bounded, time-bounded read (`execseam_adapter_kit::body`).

use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::retry::{self, Edge, NoAnswer, Stage};
use execseam_adapter_kit::text;
use execseam_adapter_kit::vars::config_error;
use execseam_core::Error;
use kube::client::{Body, ConfigExt};
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::PROVIDER;
use crate::config::{KubernetesConfig, Source};
pub(crate) use crate::error::{adapter, no_answer, status_error, transport};

/// The largest JSON answer read (a list of a few thousand objects).
pub(crate) const MAX_BODY: usize = 32 << 20;
/// The largest error answer read (the rest is not needed to classify it).
pub(crate) const MAX_ERROR_BODY: usize = 64 << 10;

/// What the API server answers before a request reaches its handler: the max-in-flight and
/// priority-and-fairness filters reject with 429 before the handler runs
/// (`k8s.io/apiserver/pkg/server/filters/maxinflight.go`, `priority-and-fairness.go`), so a
/// create that got *their* 429 made nothing. Only for an answer recognised as theirs
/// ([`crate::error::signed_429`]): a bare 429 may come from a proxy that forwarded (issue 38).
pub(crate) const EDGE: Edge = Edge {
    before_forwarding: &[429],
    evidence: "the API server's max-in-flight and APF filters answer 429 before the handler (apiserver/pkg/server/filters)",
};

/// The cluster connection: the kube client (built on the first call) and the namespace.
pub(crate) struct Api {
    config: KubernetesConfig,
    client: OnceCell<Connected>,
}

#[derive(Clone)]
pub(crate) struct Connected {
    pub(crate) client: kube::Client,
    pub(crate) namespace: String,
}

execseam_adapter_kit::debug_fields!(self => Api { connected: self.client.initialized() });

/// A request's answer: status, headers, the whole body (bounded).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Bytes,
}

impl Api {
    pub(crate) fn new(config: KubernetesConfig) -> Api {
        Api {
            config,
            client: OnceCell::new(),
        }
    }

    pub(crate) fn config(&self) -> &KubernetesConfig {
        &self.config
    }

    /// The client, built on first use (reading the kubeconfig or the service account).
    pub(crate) async fn connected(&self) -> Result<&Connected, Error> {
        self.client.get_or_try_init(|| connect(&self.config)).await
    }

    /// The namespace everything lives in.
    pub(crate) async fn namespace(&self) -> Result<String, Error> {
        Ok(self.connected().await?.namespace.clone())
    }

    /// Sends `request` and reads its answer (at most `limit` bytes of body), all within the
    /// request timeout. Transport failures are errors; any HTTP status is an [`Answer`].
    pub(crate) async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        op: &'static str,
        stage: Stage,
        limit: usize,
    ) -> Result<Answer, Error> {
        let c = self.connected().await?;
        let deadline = self.config.request_timeout;
        let work = async {
            let response = c
                .client
                .send(request.map(Body::from))
                .await
                .map_err(|e| transport(e, op, stage))?;
            let (parts, body) = response.into_parts();
            // An error answer is quoted, never a failure of its own: the status decides.
            let body = if parts.status.is_success() {
                read_limited(body, limit, deadline, op, stage).await?
            } else {
                read_error(body, deadline).await
            };
            Ok(Answer {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        };
        within_request_timeout(deadline, work, op, stage).await
    }

    /// Sends `request` and decodes a 2xx answer as `T`; any other status is the error its
    /// `Status` body says.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        request: http::Request<Vec<u8>>,
        op: &'static str,
        stage: Stage,
    ) -> Result<T, Error> {
        let answer = self.send(request, op, stage, MAX_BODY).await?;
        if !(200..300).contains(&answer.status) {
            return Err(status_error(&answer, op, stage));
        }
        parse(&answer.body, op, stage)
    }

    /// Sends `request` and returns the unread response (watches and exec upgrades), within the
    /// request timeout for the headers.
    pub(crate) async fn open(
        &self,
        request: http::Request<Vec<u8>>,
        op: &'static str,
        stage: Stage,
    ) -> Result<http::Response<Body>, Error> {
        let c = self.connected().await?;
        let deadline = self.config.request_timeout;
        let send = async {
            (c.client.send(request.map(Body::from)).await).map_err(|e| transport(e, op, stage))
        };
        within_request_timeout(deadline, send, op, stage).await
    }
}

/// `work`, cut at the request timeout `deadline` with [`NoAnswer::Timeout`].
async fn within_request_timeout<T>(
    deadline: Duration,
    work: impl Future<Output = Result<T, Error>>,
    op: &'static str,
    stage: Stage,
) -> Result<T, Error> {
    tokio::time::timeout(deadline, work)
        .await
        .unwrap_or_else(|_| {
            Err(no_answer(
                NoAnswer::Timeout,
                op,
                stage,
                format!(
                    "no answer within {} s (EXECSEAM_KUBERNETES_REQUEST_TIMEOUT)",
                    deadline.as_secs()
                ),
            ))
        })
}

async fn connect(config: &KubernetesConfig) -> Result<Connected, Error> {
    let mut kc = kube_config(&config.source).await?;
    if kc.proxy_url.is_some() {
        return Err(config_error(
            PROVIDER,
            "the kubeconfig names a proxy-url: proxies are not supported by this adapter",
        ));
    }
    // The layers below replace kube's client builder (no retry, no URI in traces); the request
    // deadline is ours, per request; a read timeout would cut long execs and watches.
    kc.read_timeout = None;
    kc.default_retry = false;
    let namespace = config
        .namespace
        .clone()
        .unwrap_or_else(|| kc.default_namespace.clone());
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(kc.connect_timeout);
    let https = kc
        .rustls_https_connector_with_connector(http)
        .map_err(|e| config_error(PROVIDER, format!("TLS: {}", text::error_chain(&e))))?;
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Body>(https);
    let auth = kc
        .auth_layer()
        .map_err(|e| config_error(PROVIDER, format!("credentials: {}", text::error_chain(&e))))?;
    let headers = kc
        .extra_headers_layer()
        .map_err(|e| config_error(PROVIDER, format!("headers: {}", text::error_chain(&e))))?;
    let service = tower::ServiceBuilder::new()
        .layer(kc.base_uri_layer())
        .option_layer(auth)
        .layer(headers)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(Connected {
        client: kube::Client::new(service, namespace.clone()),
        namespace,
    })
}

async fn kube_config(source: &Source) -> Result<kube::Config, Error> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    match source {
        Source::Explicit {
            server,
            token,
            ca_cert,
            insecure,
        } => {
            let uri: http::Uri = server
                .parse()
                .map_err(|_| config_error(PROVIDER, format!("{server:?} is not a URL")))?;
            let mut c = kube::Config::new(uri);
            c.auth_info.token = token.clone();
            c.root_cert_file = ca_cert.clone();
            c.accept_invalid_certs = *insecure;
            if let Some(path) = ca_cert {
                // Read once here so a missing file is a configuration error, not a TLS failure.
                let pem = tokio::fs::read(path).await.map_err(|e| {
                    config_error(
                        PROVIDER,
                        format!("EXECSEAM_KUBERNETES_CA_CERT {}: {e}", path.display()),
                    )
                })?;
                c.root_cert = Some(pem_certificates(&pem).map_err(|m| {
                    config_error(
                        PROVIDER,
                        format!("EXECSEAM_KUBERNETES_CA_CERT {}: {m}", path.display()),
                    )
                })?);
            }
            Ok(c)
        }
        Source::Infer {
            kubeconfig,
            context,
        } => {
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            let result = match kubeconfig {
                Some(path) => {
                    let kc = Kubeconfig::read_from(path).map_err(|e| {
                        config_error(
                            PROVIDER,
                            format!("kubeconfig {}: {}", path.display(), text::error_chain(&e)),
                        )
                    })?;
                    kube::Config::from_custom_kubeconfig(kc, &options)
                        .await
                        .map_err(|e| text::error_chain(&e))
                }
                None if context.is_some() => kube::Config::from_kubeconfig(&options)
                    .await
                    .map_err(|e| text::error_chain(&e)),
                None => kube::Config::infer()
                    .await
                    .map_err(|e| text::error_chain(&e)),
            };
            result.map_err(|m| {
                config_error(PROVIDER, format!(
                    "no cluster configuration (KUBECONFIG, ~/.kube/config, in-cluster, or EXECSEAM_KUBERNETES_SERVER): {m}"
                ))
            })
        }
    }
}

/// The DER certificates of a PEM bundle.
fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine as _;
    let text = std::str::from_utf8(pem).map_err(|_| "not PEM text".to_owned())?;
    let mut out = Vec::new();
    let mut inside: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line == "-----BEGIN CERTIFICATE-----" {
            inside = Some(String::new());
        } else if line == "-----END CERTIFICATE-----" {
            let b64 = inside.take().ok_or("END without BEGIN")?;
            let der = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("bad base64 in a certificate: {e}"))?;
            out.push(der);
        } else if let Some(acc) = inside.as_mut() {
            acc.push_str(line);
        }
    }
    if out.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(out)
}

/// Reads a body to its end: at most `limit` bytes, within `within` (the kit's bounded read).
pub(crate) async fn read_limited(
    body: Body,
    limit: usize,
    within: Duration,
    op: &'static str,
    stage: Stage,
) -> Result<Bytes, Error> {
    execseam_adapter_kit::body::read(body, limit, within)
        .await
        .map_err(|e| e.into_error(retry::Call::new(PROVIDER, op, stage)))
}

/// The start of an error answer, to quote it: at most [`MAX_ERROR_BODY`], within `within`.
pub(crate) async fn read_error(body: Body, within: Duration) -> Bytes {
    execseam_adapter_kit::body::read_prefix(body, MAX_ERROR_BODY, within).await
}

/// Decodes a JSON answer.
pub(crate) fn parse<T: DeserializeOwned>(
    body: &[u8],
    op: &'static str,
    stage: Stage,
) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| {
        no_answer(
            NoAnswer::Malformed,
            op,
            stage,
            format!("cannot decode the answer: {e}"),
        )
    })
}

/// Waits `d`, capped by what is left of `deadline`.
pub(crate) async fn pause(d: Duration, deadline: tokio::time::Instant) {
    let now = tokio::time::Instant::now();
    tokio::time::sleep(d.min(deadline.saturating_duration_since(now))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_bundles_decode() {
        let pem = b"junk\n-----BEGIN CERTIFICATE-----\nAAEC\nAw==\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(pem).unwrap(), vec![vec![0, 1, 2, 3]]);
        assert!(pem_certificates(b"nothing").is_err());
    }
}
