//! HTTP and WebSocket plumbing. reqwest does the TLS and the upgrade request (so a refused
//! upgrade's status and body are read like any answer); tokio-websockets frames the upgraded
//! connection. Not tokio-tungstenite (which the issue suggested): tungstenite logs every frame's
//! payload at TRACE through `log`, and the `init` frame carries the token and the command, the
//! `payload` frames stdin (tests/secrets.rs shows that nothing reaches a log now).

use execseam_adapter_kit::http::{self, ClientOptions, Refusal};
use execseam_adapter_kit::retry::Call;
use execseam_adapter_kit::ws;
use execseam_core::Error;
use reqwest::{Method, Url};

use crate::PROVIDER;
use crate::config::NorthflankConfig;
use crate::error::{CallError, map};

pub(crate) type Ws = ws::Socket;

/// The most of a REST answer read (a service or a list of them).
const MAX_JSON_BODY: usize = 16 << 20;

/// The API of one project.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) upgrades: reqwest::Client,
    pub(crate) base: Url,
    pub(crate) config: NorthflankConfig,
}

impl Api {
    pub(crate) fn new(config: NorthflankConfig, base: Url) -> Result<Api, Error> {
        let options = ClientOptions::new(config.connect_timeout);
        Ok(Api {
            http: http::client(PROVIDER, options.clone())?,
            upgrades: http::client(PROVIDER, options.http1_only())?,
            base,
            config,
        })
    }

    fn url(&self, path: &str) -> Url {
        let mut u = self.base.clone();
        u.set_path(&format!(
            "{}/{}",
            u.path().trim_end_matches('/'),
            path.trim_start_matches('/')
        ));
        u.set_query(None);
        u
    }

    /// `/v1/[teams/{t}/]projects/{p}/{rest}`.
    pub(crate) fn project_path(&self, rest: &str) -> String {
        let esc = execseam_adapter_kit::text::escape_path_segment;
        let team = self
            .config
            .team_id
            .as_deref()
            .map(|t| format!("teams/{}/", esc(t)))
            .unwrap_or_default();
        format!("/v1/{team}projects/{}/{rest}", esc(&self.config.project_id))
    }

    /// A REST `GET`; the answer's `data`, read bounded in size and time.
    pub(crate) async fn get(&self, path: &str, call: Call) -> Result<serde_json::Value, Error> {
        let within = self.config.request_timeout;
        let resp = self
            .http
            .request(Method::GET, self.url(path))
            .bearer_auth(self.config.token())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(within)
            .send()
            .await
            .map_err(|e| http::transport_error(call, e))?;
        if !resp.status().is_success() {
            let r = Refusal::read(resp, within).await;
            return Err(map(CallError::http(r.status, &r.headers, &r.body), call));
        }
        let body = http::read_body(resp, MAX_JSON_BODY, within)
            .await
            .map_err(|e| e.into_error(call))?;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            map(
                CallError::Protocol(format!("the answer is not JSON: {e}")),
                call,
            )
        })?;
        Ok(v["data"].clone())
    }

    /// Opens the exec WebSocket at `path` (no auth header: the token goes in the `init` frame).
    pub(crate) async fn upgrade(&self, path: &str, call: Call) -> Result<Ws, Error> {
        let request = self.upgrades.get(self.url(path));
        ws::upgrade(request, self.config.request_timeout, MAX_WS_MESSAGE)
            .await
            .map(|up| up.socket)
            .map_err(|e| {
                e.into_error(call, |r| {
                    map(CallError::http(r.status, &r.headers, &r.body), call)
                })
            })
    }
}

/// The largest message accepted from the proxy (an output frame is one base64 chunk).
const MAX_WS_MESSAGE: usize = 64 << 20;
