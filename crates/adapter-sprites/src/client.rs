//! HTTP and WebSocket calls. reqwest does the HTTP (TLS, proxies, the upgrade request and its
//! error answers); tokio-tungstenite frames the upgraded connection.

use std::sync::Arc;

use bytes::Bytes;
use execseam_core::{Error, ErrorKind};
use reqwest::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, HeaderMap, UPGRADE};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::config::SpritesConfig;
use crate::error::{Op, error, from_status, from_transport, protocol};
use crate::wire::FsList;

pub(crate) type Ws = WebSocketStream<reqwest::Upgraded>;

/// A connected exec WebSocket.
pub(crate) struct Connected {
    pub(crate) ws: Ws,
    /// `X-Sprite-Capabilities` lists `signal`: the server takes signal messages on the socket.
    pub(crate) signal_capable: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    upgrades: reqwest::Client,
    config: Arc<SpritesConfig>,
}

fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A fresh `Sec-WebSocket-Key`: 16 unpredictable-enough bytes, base64 (RFC 6455 only asks for a
/// nonce).
fn websocket_key() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    execseam_core::degrade::base64_encode(&bytes)
}

impl Client {
    pub(crate) fn new(config: Arc<SpritesConfig>) -> Result<Client, Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let build = |http1: bool| {
            let mut b = reqwest::Client::builder()
                .connect_timeout(config.connect_timeout)
                .retry(reqwest::retry::never())
                .redirect(reqwest::redirect::Policy::none());
            if http1 {
                b = b.http1_only();
            }
            b.build().map_err(|e| {
                error(
                    ErrorKind::Internal,
                    Op::Control("connect"),
                    format!("cannot build the HTTP client: {e}"),
                )
            })
        };
        Ok(Client {
            http: build(false)?,
            upgrades: build(true)?,
            config,
        })
    }

    pub(crate) fn config(&self) -> &SpritesConfig {
        &self.config
    }

    fn url(&self, suffix: &str, query: &[(String, String)]) -> Result<reqwest::Url, Error> {
        let raw = format!(
            "{}/v1/sprites/{}{suffix}",
            self.config.base_url,
            segment(&self.config.sprite)
        );
        let mut url = reqwest::Url::parse(&raw).map_err(|e| {
            error(
                ErrorKind::InvalidCommand,
                Op::Control("connect"),
                format!("invalid base URL {:?}: {e}", self.config.base_url),
            )
        })?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    /// Opens `GET /exec?…` as a WebSocket. A refused upgrade is mapped from its status and body.
    pub(crate) async fn connect(&self, query: &[(String, String)]) -> Result<Connected, Error> {
        let url = self.url("/exec", query)?;
        let key = websocket_key();
        let send = self
            .upgrades
            .get(url)
            .version(reqwest::Version::HTTP_11)
            .header(AUTHORIZATION, self.config.authorization())
            .header(CONNECTION, "Upgrade")
            .header(UPGRADE, "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", &key)
            .send();
        let resp = match tokio::time::timeout(self.config.request_timeout, send).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(from_transport(e, Op::Exec)),
            Err(_) => {
                return Err(error(
                    ErrorKind::Timeout(execseam_core::Deadline::Request),
                    Op::Exec,
                    format!(
                        "no answer to the WebSocket upgrade within {:?}",
                        self.config.request_timeout
                    ),
                )
                .with_retry(execseam_core::Retry::Unsafe));
            }
        };
        let status = resp.status().as_u16();
        if status != 101 {
            let headers = resp.headers().clone();
            let body = resp.bytes().await.unwrap_or_default();
            return Err(from_status(status, &headers, &body, Op::Exec));
        }
        let want = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let accept = resp
            .headers()
            .get("sec-websocket-accept")
            .and_then(|v| v.to_str().ok());
        if accept != Some(want.as_str()) {
            return Err(protocol(
                Op::Exec,
                format!("the upgrade answer has Sec-WebSocket-Accept {accept:?}, want {want:?}"),
            ));
        }
        let signal_capable = resp
            .headers()
            .get("x-sprite-capabilities")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|c| c.trim() == "signal"));
        let upgraded = resp
            .upgrade()
            .await
            .map_err(|e| from_transport(e, Op::Exec))?;
        // Output frames can be large: the Python SDK allows 10 MiB per message; allow more.
        let config = WebSocketConfig::default()
            .max_message_size(Some(64 << 20))
            .max_frame_size(Some(64 << 20));
        let ws = WebSocketStream::from_raw_socket(upgraded, Role::Client, Some(config)).await;
        Ok(Connected { ws, signal_capable })
    }

    /// `POST /exec?…` with stdin as the body; the successful response, not yet read.
    pub(crate) async fn post_exec(
        &self,
        query: &[(String, String)],
        stdin: Bytes,
    ) -> Result<reqwest::Response, Error> {
        let url = self.url("/exec", query)?;
        let resp = self
            .http
            .post(url)
            .header(AUTHORIZATION, self.config.authorization())
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(stdin)
            .send()
            .await
            .map_err(|e| from_transport(e, Op::Exec))?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(resp);
        }
        let headers: HeaderMap = resp.headers().clone();
        let body = resp.bytes().await.unwrap_or_default();
        Err(from_status(status, &headers, &body, Op::Exec))
    }

    /// `POST /exec/{id}/kill?signal=KILL&timeout=0s` (sprites-go's form). 410 (already exited)
    /// is success.
    pub(crate) async fn kill(&self, session_id: &str) -> Result<(), Error> {
        let op = Op::Control("kill");
        let url = self.url(
            &format!("/exec/{}/kill", segment(session_id)),
            &[
                ("signal".to_owned(), "KILL".to_owned()),
                ("timeout".to_owned(), "0s".to_owned()),
            ],
        )?;
        let resp = self
            .http
            .post(url)
            .header(AUTHORIZATION, self.config.authorization())
            .timeout(self.config.request_timeout)
            .send()
            .await
            .map_err(|e| from_transport(e, op))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        // The answer is an NDJSON progress stream; reading it to the end waits for the kill.
        let body = resp.bytes().await.map_err(|e| from_transport(e, op))?;
        match status {
            200 | 410 => Ok(()),
            _ => Err(from_status(status, &headers, &body, op)),
        }
    }

    /// Whether `dir` is missing (or not a directory) in the sprite, through the filesystem API.
    /// `None` when the answer says neither.
    pub(crate) async fn dir_missing(&self, dir: &str) -> Option<String> {
        let url = self
            .url(
                "/fs/list",
                &[
                    ("path".to_owned(), dir.to_owned()),
                    ("workingDir".to_owned(), "/".to_owned()),
                ],
            )
            .ok()?;
        let resp = self
            .http
            .get(url)
            .header(AUTHORIZATION, self.config.authorization())
            .timeout(self.config.request_timeout)
            .send()
            .await
            .ok()?;
        match resp.status().as_u16() {
            404 => Some(format!("workdir does not exist: {dir}")),
            200 => {
                let list: FsList = resp.json().await.ok()?;
                match list.entries.as_slice() {
                    [only] if only.path == dir && !only.is_dir => {
                        Some(format!("workdir is not a directory: {dir}"))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}
