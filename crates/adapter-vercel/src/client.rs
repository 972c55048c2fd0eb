//! HTTP plumbing: every request carries `Authorization: Bearer <token>` and `?teamId=`, as the
//! SDKs send them (`APIClient.request`).

use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::VercelConfig;
use crate::error::CallError;

const USER_AGENT: &str = concat!("execseam-vercel/", env!("CARGO_PKG_VERSION"));

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

pub(crate) fn http_client(config: &VercelConfig) -> Result<reqwest::Client, reqwest::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

impl Api {
    fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut u = self.base.clone();
        let p = format!(
            "{}/{}",
            u.path().trim_end_matches('/'),
            path.trim_start_matches('/')
        );
        u.set_path(&p);
        u.set_query(None);
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
            .bearer_auth(self.config.token())
            .header(reqwest::header::USER_AGENT, USER_AGENT);
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
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        // An error body is read only as far as it is quoted: an endless one cannot grow.
        let body = read_prefix(resp, MAX_ERROR_BODY)
            .await
            .map(|(b, _)| b)
            .unwrap_or_default();
        Err(CallError::http(status, &headers, &body))
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
        let bytes = read_bounded(resp, MAX_JSON_BODY).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            CallError::Protocol(format!(
                "unexpected answer ({e}): {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
        })
    }
}

/// The most of an error body read (the rest is not needed to quote it).
pub(crate) const MAX_ERROR_BODY: usize = 64 * 1024;
/// The largest JSON answer accepted (a sandbox, a command, a listing page).
pub(crate) const MAX_JSON_BODY: usize = 8 << 20;

/// The body, at most `max` bytes: past that, `Protocol`.
pub(crate) async fn read_bounded(
    resp: reqwest::Response,
    max: usize,
) -> Result<bytes::Bytes, CallError> {
    let (body, whole) = read_prefix(resp, max).await?;
    if !whole {
        return Err(CallError::Protocol(format!(
            "an answer longer than {max} bytes"
        )));
    }
    Ok(body)
}

/// The first `max` bytes of the body, and whether that was all of it (nothing more is read).
async fn read_prefix(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<(bytes::Bytes, bool), CallError> {
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(CallError::Transport)? {
        let room = max - out.len();
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            return Ok((out.freeze(), false));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out.freeze(), true))
}
