//! HTTP and WebSocket plumbing. reqwest does the TLS and the upgrade request (so a refused
//! upgrade's status and body are read like any answer); tokio-websockets frames the upgraded
//! connection. Not tokio-tungstenite (which the issue suggested): tungstenite logs every frame's
//! payload at TRACE through `log`, and the `init` frame carries the token and the command, the
//! `payload` frames stdin (tests/secrets.rs shows that nothing reaches a log now).

use base64::Engine as _;
use reqwest::header::{CONNECTION, UPGRADE};
use reqwest::{Method, Url};
use tokio_websockets::WebSocketStream;

use crate::config::NorthflankConfig;
use crate::error::CallError;

const USER_AGENT: &str = concat!("execseam-northflank/", env!("CARGO_PKG_VERSION"));

pub(crate) type Ws = WebSocketStream<reqwest::Upgraded>;

/// The API of one project.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) upgrades: reqwest::Client,
    pub(crate) base: Url,
    pub(crate) config: NorthflankConfig,
}

impl Api {
    pub(crate) fn new(config: NorthflankConfig, base: Url) -> Result<Api, reqwest::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let build = |http1: bool| {
            let mut b = reqwest::Client::builder()
                .connect_timeout(config.connect_timeout)
                .retry(reqwest::retry::never())
                .redirect(reqwest::redirect::Policy::none());
            if http1 {
                b = b.http1_only();
            }
            b.build()
        };
        Ok(Api {
            http: build(false)?,
            upgrades: build(true)?,
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

    /// A REST `GET`; the answer's `data`.
    pub(crate) async fn get(&self, path: &str) -> Result<serde_json::Value, CallError> {
        let resp = self
            .http
            .request(Method::GET, self.url(path))
            .bearer_auth(self.config.token())
            .header(reqwest::header::USER_AGENT, USER_AGENT)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.config.request_timeout)
            .send()
            .await
            .map_err(CallError::Transport)?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.map_err(CallError::Transport)?;
        if !(200..300).contains(&status) {
            return Err(CallError::http(status, &headers, &body));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| CallError::Protocol(format!("the answer is not JSON: {e}")))?;
        Ok(v["data"].clone())
    }

    /// Opens the exec WebSocket at `path` (no auth header: the token goes in the `init` frame).
    pub(crate) async fn upgrade(&self, path: &str) -> Result<Ws, CallError> {
        let mut url = self.url(path);
        // reqwest speaks http(s); the scheme only matters to the server as ws(s).
        let _ = url.set_scheme(if url.scheme() == "https" {
            "https"
        } else {
            "http"
        });
        let key = {
            let r = [
                execseam_adapter_kit::id::random_u64().to_le_bytes(),
                execseam_adapter_kit::id::random_u64().to_le_bytes(),
            ]
            .concat();
            base64::engine::general_purpose::STANDARD.encode(r)
        };
        let send = self
            .upgrades
            .get(url)
            .version(reqwest::Version::HTTP_11)
            .header(reqwest::header::USER_AGENT, USER_AGENT)
            .header(CONNECTION, "Upgrade")
            .header(UPGRADE, "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", &key)
            .send();
        let resp = match tokio::time::timeout(self.config.request_timeout, send).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(CallError::Transport(e)),
            Err(_) => {
                return Err(CallError::Timeout(format!(
                    "no answer to the WebSocket upgrade within {:?}",
                    self.config.request_timeout
                )));
            }
        };
        let status = resp.status().as_u16();
        if status != 101 {
            let headers = resp.headers().clone();
            let body = resp.bytes().await.unwrap_or_default();
            return Err(CallError::http(status, &headers, &body));
        }
        let want = ws_accept(&key);
        let accept = resp
            .headers()
            .get("sec-websocket-accept")
            .and_then(|v| v.to_str().ok());
        if accept != Some(want.as_str()) {
            return Err(CallError::Protocol(format!(
                "the upgrade answer has Sec-WebSocket-Accept {accept:?}, want {want:?}"
            )));
        }
        let upgraded = resp.upgrade().await.map_err(CallError::Transport)?;
        let limits = tokio_websockets::Limits::default().max_payload_len(Some(MAX_WS_MESSAGE));
        Ok(tokio_websockets::ClientBuilder::new()
            .limits(limits)
            .take_over(upgraded))
    }
}

/// The largest message accepted from the proxy (an output frame is one base64 chunk).
const MAX_WS_MESSAGE: usize = 64 << 20;

/// The `Sec-WebSocket-Accept` a server must answer `key` with (RFC 6455 §4.2.2).
fn ws_accept(key: &str) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.as_bytes());
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn accept_key_is_rfc_6455s() {
        // RFC 6455 §1.3's example.
        assert_eq!(
            super::ws_accept("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
