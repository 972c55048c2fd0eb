//! HTTP plumbing: every request carries `Authorization: Bearer <token>` and `?teamId=`, as the
//! SDKs send them (`APIClient.request`).

use execseam_adapter_kit::http::{self, BodyError, ClientOptions, Refusal};
use execseam_core::Error;
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::PROVIDER;
use crate::config::VercelConfig;
use crate::error::CallError;

/// The API, bound to one team and project.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) base: Url,
    pub(crate) config: VercelConfig,
}

/// A request body.
pub(crate) enum Body {
    None,
    Json(Vec<u8>),
    /// A file upload: a gzip'd tar whose entry names are relative to `/` (`x-cwd: /`).
    TarGz(Vec<u8>),
}

impl Body {
    pub(crate) fn json(v: &impl Serialize) -> Body {
        Body::Json(serde_json::to_vec(v).expect("serializable"))
    }
}

pub(crate) fn http_client(config: &VercelConfig) -> Result<reqwest::Client, Error> {
    http::client(PROVIDER, ClientOptions::new(config.connect_timeout))
}

impl Api {
    fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut u = execseam_adapter_kit::url_path::under(&self.base, path);
        {
            let mut q = u.query_pairs_mut();
            q.append_pair("teamId", &self.config.team_id);
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        u
    }

    /// Sends a request; an error status becomes [`CallError::Http`]. `stream`: no overall
    /// timeout (a command's NDJSON lasts as long as the command).
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Body,
        stream: bool,
    ) -> Result<reqwest::Response, CallError> {
        let mut req = self
            .http
            .request(method, self.url(path, query))
            .bearer_auth(self.config.token());
        if !stream {
            req = req.timeout(self.config.request_timeout);
        }
        req = match body {
            Body::None => req,
            Body::Json(b) => req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b),
            Body::TarGz(b) => req
                .header(reqwest::header::CONTENT_TYPE, "application/gzip")
                .header("x-cwd", "/")
                .body(b),
        };
        let resp = req.send().await.map_err(CallError::Transport)?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        // An error body is read only as far as it is quoted, and only as long as a request may
        // take: an endless or stalled one cannot grow or hang.
        let r = Refusal::read(resp, self.config.request_timeout).await;
        Err(CallError::http(r.status, &r.headers, &r.body))
    }

    /// A JSON request answered with JSON.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Body,
    ) -> Result<T, CallError> {
        let resp = self.send(method, path, query, body, false).await?;
        let bytes = read_bounded(resp, MAX_JSON_BODY, self.config.request_timeout).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            CallError::Protocol(format!(
                "unexpected answer ({e}): {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
        })
    }
}

/// The largest JSON answer accepted (a sandbox, a command, a listing page).
pub(crate) const MAX_JSON_BODY: usize = 8 << 20;

/// The body, at most `max` bytes (past that, `Protocol`), ended by `within`.
pub(crate) async fn read_bounded(
    resp: reqwest::Response,
    max: usize,
    within: std::time::Duration,
) -> Result<bytes::Bytes, CallError> {
    http::read_body(resp, max, within)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge { limit } => {
                CallError::Protocol(format!("an answer longer than {limit} bytes"))
            }
            other => CallError::Body(other),
        })
}
