//! HTTP and WebSocket calls. reqwest does the HTTP (TLS, proxies, the upgrade request and its
//! error answers); tokio-websockets frames the upgraded connection (tungstenite logs every
//! frame's payload, stdin included, at TRACE).

use std::sync::Arc;

use bytes::Bytes;
use execseam_adapter_kit::http::{self, ClientOptions, Refusal};
use execseam_adapter_kit::retry::Call;
use execseam_adapter_kit::ws;
use execseam_core::{Error, ErrorKind};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, Response, Url};

use crate::PROVIDER;
use crate::config::SpritesConfig;
use crate::error::{EXEC, control, from_status};
use crate::wire::FsList;

pub(crate) type Ws = ws::Socket;

/// The longest exec URL sent: argv and env travel in its query, and front ends refuse request
/// lines past 64 KiB (an over-long one was answered as if the service were unavailable).
pub const MAX_EXEC_URL: usize = 60 << 10;

/// The largest WebSocket message read (the Python SDK allows 10 MiB; this allows more). A
/// frame announcing more fails with `Protocol` as soon as its header is read, before any of
/// its payload is buffered.
pub const MAX_WS_FRAME: usize = 64 << 20;

/// The most of a control answer read.
const MAX_JSON_BODY: usize = 16 << 20;

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
    /// The API's base URL, parsed once (by the configuration's check).
    base: Url,
    sprite: String,
}

fn segment(s: &str) -> String {
    execseam_adapter_kit::text::escape_path_segment(s)
}

impl Client {
    pub(crate) fn new(config: Arc<SpritesConfig>) -> Result<Client, Error> {
        let base = config.parsed_base_url()?;
        let options = ClientOptions::new(config.connect_timeout);
        Ok(Client {
            // Silence on any read (headers, or between body chunks) ends the request: an idle
            // timeout, reset by every byte.
            http: http::client(
                PROVIDER,
                options.clone().read_timeout(config.http_idle_timeout),
            )?,
            // The upgrade client: its connection becomes the WebSocket, whose silence the pings
            // bound.
            upgrades: http::client(PROVIDER, options.http1_only())?,
            config,
            base,
            sprite: String::new(),
        })
    }

    /// The same client for sprite `name`.
    pub(crate) fn for_sprite(&self, name: &str) -> Client {
        Client {
            http: self.http.clone(),
            upgrades: self.upgrades.clone(),
            config: self.config.clone(),
            base: self.base.clone(),
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
        let op = crate::error::CREATE;
        let body = serde_json::json!({ "name": name }).to_string();
        let resp = self
            .send(
                self.control(Method::POST, self.path("/v1/sprites"))
                    .header(CONTENT_TYPE, "application/json")
                    .body(body),
                op,
            )
            .await?;
        self.expect_ok(resp, op).await.map(drop)
    }

    /// `GET /v1/sprites/{name}`, for `operation`.
    pub(crate) async fn get_sprite(
        &self,
        operation: &'static str,
    ) -> Result<crate::wire::SpriteInfo, Error> {
        self.get_json("", operation, "the sprite").await
    }

    /// `GET /v1/sprites/{name}/services` (sprites-go `services.go` `ListServices`).
    pub(crate) async fn list_services(
        &self,
        operation: &'static str,
    ) -> Result<Vec<crate::wire::ServiceWithState>, Error> {
        self.get_json("/services", operation, "the services").await
    }

    /// `GET /v1/sprites/{name}{suffix}`, its JSON body as `T` (`what` names it in the error).
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        suffix: &str,
        operation: &'static str,
        what: &str,
    ) -> Result<T, Error> {
        let op = control(operation);
        let resp = self
            .send(self.control(Method::GET, self.url(suffix, &[])?), op)
            .await?;
        let body = self.expect_ok(resp, op).await?;
        serde_json::from_slice(&body)
            .map_err(|e| op.protocol(format!("{what} is not valid JSON: {e}")))
    }

    /// The `Authorization` value of the API token (what an `auth: sprite` URL takes).
    pub(crate) fn authorization(&self) -> String {
        self.config.authorization()
    }

    /// `DELETE /v1/sprites/{name}`.
    pub(crate) async fn delete_sprite(&self) -> Result<(), Error> {
        let op = control("destroy");
        let resp = self
            .send(self.control(Method::DELETE, self.url("", &[])?), op)
            .await?;
        self.expect_ok(resp, op).await.map(drop)
    }

    /// `POST /v1/sprites/{name}/checkpoint {"comment"}`, or `POST …/checkpoints/{id}/restore`
    /// (`suffix`): an NDJSON answer whose `error` message is the operation's failure.
    pub(crate) async fn checkpoint_stream(
        &self,
        suffix: &str,
        body: Option<String>,
        op: Call,
    ) -> Result<(), Error> {
        let mut rb = self.control(Method::POST, self.url(suffix, &[])?);
        if let Some(b) = body {
            rb = rb.header(CONTENT_TYPE, "application/json").body(b);
        }
        let resp = self.send(rb, op).await?;
        let body = self.expect_ok(resp, op).await?;
        match crate::wire::stream_error(&body) {
            None => Ok(()),
            Some(m) => Err(op.error(ErrorKind::Unavailable, m)),
        }
    }

    /// `GET /v1/sprites/{name}/checkpoints`: a JSON list, newest first.
    pub(crate) async fn list_checkpoints(&self) -> Result<Vec<crate::wire::CheckpointInfo>, Error> {
        let op = control("list_snapshots");
        let resp = self
            .send(
                self.control(Method::GET, self.url("/checkpoints", &[])?),
                op,
            )
            .await?;
        let body = self.expect_ok(resp, op).await?;
        serde_json::from_slice(&body).map_err(|e| {
            op.no_answer(
                execseam_adapter_kit::retry::NoAnswer::Malformed,
                format!("a checkpoint list that is not a JSON list: {e}"),
            )
        })
    }

    /// `GET /v1/sprites`, every page (`continuation_token`).
    pub(crate) async fn list_sprites(&self) -> Result<Vec<crate::wire::SpriteInfo>, Error> {
        let op = control("list");
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = self.path("/v1/sprites");
            if let Some(t) = &token {
                url.query_pairs_mut().append_pair("continuation_token", t);
            }
            let resp = self.send(self.control(Method::GET, url), op).await?;
            let body = self.expect_ok(resp, op).await?;
            let page: crate::wire::SpriteList = serde_json::from_slice(&body)
                .map_err(|e| op.protocol(format!("the sprite list is not valid JSON: {e}")))?;
            out.extend(page.sprites);
            match page.next_continuation_token.filter(|t| !t.is_empty()) {
                Some(t) if page.has_more => token = Some(t),
                _ => return Ok(out),
            }
        }
    }

    /// A control-plane request: the token, the request timeout.
    fn control(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        self.http
            .request(method, url)
            .header(AUTHORIZATION, self.config.authorization())
            .timeout(self.config.request_timeout)
    }

    /// Sends a control-plane request made by [`control`](Self::control).
    async fn send(&self, request: reqwest::RequestBuilder, op: Call) -> Result<Response, Error> {
        request
            .send()
            .await
            .map_err(|e| http::transport_error(op, e))
    }

    async fn expect_ok(&self, resp: Response, op: Call) -> Result<Bytes, Error> {
        let within = self.config.request_timeout;
        if !resp.status().is_success() {
            let r = Refusal::read(resp, within).await;
            return Err(from_status(r.status, &r.headers, &r.body, op));
        }
        http::read_body(resp, MAX_JSON_BODY, within)
            .await
            .map_err(|e| e.into_error(op))
    }

    /// `path` under the base URL (its own path kept).
    fn path(&self, path: &str) -> Url {
        let mut url = self.base.clone();
        let joined = format!("{}{path}", url.path().trim_end_matches('/'));
        url.set_path(&joined);
        url
    }

    fn url(&self, suffix: &str, query: &[(String, String)]) -> Result<Url, Error> {
        let mut url = self.path(&format!("/v1/sprites/{}{suffix}", segment(&self.sprite)));
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        if url.as_str().len() > MAX_EXEC_URL {
            // Nothing was sent: the command (argv and env, in the query) does not fit.
            return Err(EXEC
                .error(
                    ErrorKind::InvalidCommand,
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
    pub(crate) fn exec_url(&self, query: &[(String, String)]) -> Result<Url, Error> {
        self.url("/exec", query)
    }

    /// Opens `GET /exec?…` as a WebSocket. A refused upgrade is mapped from its status and body.
    pub(crate) async fn connect(&self, query: &[(String, String)]) -> Result<Connected, Error> {
        self.connect_at("/exec", query).await
    }

    async fn connect_at(&self, path: &str, query: &[(String, String)]) -> Result<Connected, Error> {
        let url = self.url(path, query)?;
        let request = self
            .upgrades
            .get(url)
            .header(AUTHORIZATION, self.config.authorization());
        // Output frames can be large: the Python SDK allows 10 MiB per message; allow more.
        let up = ws::upgrade(request, self.config.request_timeout, MAX_WS_FRAME)
            .await
            .map_err(|e| {
                e.into_error(EXEC, |r| from_status(r.status, &r.headers, &r.body, EXEC))
            })?;
        let signal_capable = up
            .headers
            .get("x-sprite-capabilities")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|c| c.trim() == "signal"));
        Ok(Connected {
            ws: up.socket,
            signal_capable,
        })
    }

    /// `POST /exec?…` with stdin as the body; the successful response, not yet read.
    pub(crate) async fn post_exec(
        &self,
        query: &[(String, String)],
        stdin: Bytes,
    ) -> Result<Response, Error> {
        let url = self.url("/exec", query)?;
        let resp = self
            .http
            .post(url)
            .header(AUTHORIZATION, self.config.authorization())
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(stdin)
            .send()
            .await
            .map_err(|e| http::transport_error(EXEC, e))?;
        if resp.status().as_u16() == 200 {
            return Ok(resp);
        }
        let r = Refusal::read(resp, self.config.request_timeout).await;
        Err(from_status(r.status, &r.headers, &r.body, EXEC))
    }

    /// `POST /exec/{id}/kill?signal=KILL&timeout=0s` (sprites-go's form). 410 (already exited)
    /// is success.
    pub(crate) async fn kill(&self, session_id: &str) -> Result<(), Error> {
        let op = control("kill");
        let url = self.url(
            &format!("/exec/{}/kill", segment(session_id)),
            &[
                ("signal".to_owned(), "KILL".to_owned()),
                ("timeout".to_owned(), "0s".to_owned()),
            ],
        )?;
        let resp = self.send(self.control(Method::POST, url), op).await?;
        // The answer is an NDJSON progress stream; reading it to the end waits for the kill.
        let r = Refusal::read(resp, self.config.request_timeout).await;
        match r.status {
            200 | 410 => Ok(()),
            _ => Err(from_status(r.status, &r.headers, &r.body, op)),
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
        let resp = self.control(Method::GET, url).send().await.ok()?;
        match resp.status().as_u16() {
            404 => Some(format!("workdir does not exist: {dir}")),
            200 => {
                // Bounded like every control answer: a larger one is cut, and does not parse.
                let body =
                    http::read_error_body(resp, MAX_JSON_BODY, self.config.request_timeout).await;
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
