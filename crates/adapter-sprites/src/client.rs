//! HTTP and WebSocket calls. reqwest does the HTTP (TLS, proxies, the upgrade request and its
//! error answers); tokio-websockets frames the upgraded connection (tungstenite logs every
//! frame's payload, stdin included, at TRACE).

use std::sync::Arc;

use bytes::Bytes;
use execseam_core::{Error, ErrorKind};
use reqwest::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, HeaderMap, UPGRADE};
use tokio_websockets::WebSocketStream;

use crate::config::SpritesConfig;
use crate::error::{Op, error, from_status, from_transport, protocol};
use crate::wire::FsList;

pub(crate) type Ws = WebSocketStream<reqwest::Upgraded>;

/// The longest exec URL sent: argv and env travel in its query, and front ends refuse request
/// lines past 64 KiB (an over-long one was answered as if the service were unavailable).
pub const MAX_EXEC_URL: usize = 60 << 10;

/// The largest WebSocket message read (the Python SDK allows 10 MiB; this allows more). A
/// frame announcing more fails with `Protocol` as soon as its header is read, before any of
/// its payload is buffered.
pub const MAX_WS_FRAME: usize = 64 << 20;

/// The most of an error answer read.
const MAX_ERROR_BODY: usize = 64 << 10;

/// The most of a control answer read.
const MAX_JSON_BODY: usize = 16 << 20;

/// Reads at most `limit` bytes of a body (the rest is not read).
async fn read_capped(mut resp: reqwest::Response, limit: usize) -> Bytes {
    let mut body = bytes::BytesMut::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    body.freeze()
}

/// The `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2).
fn websocket_accept(key: &str) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.as_bytes());
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    execseam_adapter_kit::degrade::base64_encode(&sha.digest().bytes())
}

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
    sprite: String,
}

fn segment(s: &str) -> String {
    execseam_adapter_kit::text::escape_path_segment(s)
}

/// A fresh `Sec-WebSocket-Key`: 16 unpredictable-enough bytes, base64 (RFC 6455 only asks for a
/// nonce).
fn websocket_key() -> String {
    let mut bytes = [0u8; 16];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&execseam_adapter_kit::id::random_u64().to_le_bytes());
    }
    execseam_adapter_kit::degrade::base64_encode(&bytes)
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
                // The upgrade client: its connection becomes the WebSocket, whose silence the
                // pings bound.
                b = b.http1_only();
            } else {
                // Silence on any read (headers, or between body chunks) ends the request: an
                // idle timeout, reset by every byte.
                b = b.read_timeout(config.http_idle_timeout);
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
            sprite: String::new(),
        })
    }

    /// The same client for sprite `name`.
    pub(crate) fn for_sprite(&self, name: &str) -> Client {
        Client {
            http: self.http.clone(),
            upgrades: self.upgrades.clone(),
            config: self.config.clone(),
            sprite: name.to_owned(),
        }
    }

    pub(crate) fn config(&self) -> &SpritesConfig {
        &self.config
    }

    /// The shared configuration (one allocation for every exec, not a copy per exec).
    pub(crate) fn config_arc(&self) -> Arc<SpritesConfig> {
        self.config.clone()
    }

    pub(crate) fn sprite(&self) -> &str {
        &self.sprite
    }

    /// `POST /v1/sprites {"name"}`: 201 created; 409 exists.
    pub(crate) async fn create_sprite(&self, name: &str) -> Result<(), Error> {
        let op = Op::Control("create");
        let body = serde_json::json!({ "name": name }).to_string();
        let resp = self
            .http
            .post(format!("{}/v1/sprites", self.config.base_url))
            .header(AUTHORIZATION, self.config.authorization())
            .header(CONTENT_TYPE, "application/json")
            .timeout(self.config.request_timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| from_transport(e, op))?;
        self.expect_ok(resp, op).await.map(drop)
    }

    /// `GET /v1/sprites/{name}`.
    pub(crate) async fn get_sprite(&self) -> Result<(), Error> {
        let op = Op::Control("connect");
        let resp = self
            .http
            .get(self.url("", &[])?)
            .header(AUTHORIZATION, self.config.authorization())
            .timeout(self.config.request_timeout)
            .send()
            .await
            .map_err(|e| from_transport(e, op))?;
        self.expect_ok(resp, op).await.map(drop)
    }

    /// `DELETE /v1/sprites/{name}`.
    pub(crate) async fn delete_sprite(&self) -> Result<(), Error> {
        let op = Op::Control("destroy");
        let resp = self
            .http
            .delete(self.url("", &[])?)
            .header(AUTHORIZATION, self.config.authorization())
            .timeout(self.config.request_timeout)
            .send()
            .await
            .map_err(|e| from_transport(e, op))?;
        self.expect_ok(resp, op).await.map(drop)
    }

    /// `GET /v1/sprites`, every page (`continuation_token`).
    pub(crate) async fn list_sprites(&self) -> Result<Vec<crate::wire::SpriteInfo>, Error> {
        let op = Op::Control("list");
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = reqwest::Url::parse(&format!("{}/v1/sprites", self.config.base_url))
                .map_err(|e| {
                    error(
                        ErrorKind::InvalidConfig,
                        op,
                        format!("invalid base URL: {e}"),
                    )
                })?;
            if let Some(t) = &token {
                url.query_pairs_mut().append_pair("continuation_token", t);
            }
            let resp = self
                .http
                .get(url)
                .header(AUTHORIZATION, self.config.authorization())
                .timeout(self.config.request_timeout)
                .send()
                .await
                .map_err(|e| from_transport(e, op))?;
            let body = self.expect_ok(resp, op).await?;
            let page: crate::wire::SpriteList = serde_json::from_slice(&body)
                .map_err(|e| protocol(op, format!("the sprite list is not valid JSON: {e}")))?;
            out.extend(page.sprites);
            match page.next_continuation_token.filter(|t| !t.is_empty()) {
                Some(t) if page.has_more => token = Some(t),
                _ => return Ok(out),
            }
        }
    }

    async fn expect_ok(&self, resp: reqwest::Response, op: Op) -> Result<Bytes, Error> {
        let status = resp.status().as_u16();
        let headers: HeaderMap = resp.headers().clone();
        if !(200..300).contains(&status) {
            let body = read_capped(resp, MAX_ERROR_BODY).await;
            return Err(from_status(status, &headers, &body, op));
        }
        let mut resp = resp;
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| from_transport(e, op))? {
            if body.len() + chunk.len() > MAX_JSON_BODY {
                return Err(error(
                    ErrorKind::OutputLimit,
                    op,
                    format!("the answer exceeds {MAX_JSON_BODY} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }

    fn url(&self, suffix: &str, query: &[(String, String)]) -> Result<reqwest::Url, Error> {
        let raw = format!(
            "{}/v1/sprites/{}{suffix}",
            self.config.base_url,
            segment(&self.sprite)
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
        if url.as_str().len() > MAX_EXEC_URL {
            // Nothing was sent: the command (argv and env, in the query) does not fit.
            return Err(error(
                ErrorKind::InvalidCommand,
                Op::Exec,
                format!(
                    "the command does not fit in the exec URL: {} bytes with argv and env, at most {MAX_EXEC_URL}",
                    url.as_str().len()
                ),
            )
            .with_retry(execseam_core::Retry::Never));
        }
        Ok(url)
    }

    /// The exec URL for `query`, or the error for one too long.
    pub(crate) fn exec_url(&self, query: &[(String, String)]) -> Result<reqwest::Url, Error> {
        self.url("/exec", query)
    }

    /// Opens `GET /exec?…` as a WebSocket. A refused upgrade is mapped from its status and body.
    pub(crate) async fn connect(&self, query: &[(String, String)]) -> Result<Connected, Error> {
        self.connect_at("/exec", query).await
    }

    async fn connect_at(&self, path: &str, query: &[(String, String)]) -> Result<Connected, Error> {
        let url = self.url(path, query)?;
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
            let body = read_capped(resp, MAX_ERROR_BODY).await;
            return Err(from_status(status, &headers, &body, Op::Exec));
        }
        let want = websocket_accept(&key);
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
        let ws = tokio_websockets::ClientBuilder::new()
            .limits(tokio_websockets::Limits::default().max_payload_len(Some(MAX_WS_FRAME)))
            .take_over(upgraded);
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
        let body = read_capped(resp, MAX_ERROR_BODY).await;
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
        let body = read_capped(resp, MAX_ERROR_BODY).await;
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
                // Bounded like every control answer: a larger one is cut, and does not parse.
                let body = read_capped(resp, MAX_JSON_BODY).await;
                let list: FsList = serde_json::from_slice(&body).ok()?;
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
