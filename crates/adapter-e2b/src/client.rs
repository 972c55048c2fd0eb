//! The HTTP calls: the control plane (REST) and envd (Connect RPCs plus its plain `/files` and
//! `/health` routes), with the headers the SDK sends.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use execseam_adapter_kit::http::{self, ClientOptions};
use execseam_adapter_kit::text::escape_path_segment;
use execseam_adapter_kit::url_path::under as join;
use execseam_core::Error;
use reqwest::header::{
    AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT,
};
use reqwest::{Method, Url};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::PROVIDER;
use crate::config::{ApiRoutes, E2bConfig, ENVD_PORT};
use crate::connect::{self, CallError, ServerStream};
use crate::wire;

/// `User-Agent` on every request. Never `connect-python`: envd rewrites answers for that exact
/// agent (its legacy interceptor).
pub(crate) const USER_AGENT_VALUE: &str = concat!("execseam-e2b/", env!("CARGO_PKG_VERSION"));

/// How long the `/health` probe waits (the SDK's `HEALTH_CHECK_TIMEOUT`).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Builds the HTTP client: rustls with ring, no automatic retries (an exec is never re-sent).
pub(crate) fn http_client(config: &E2bConfig) -> Result<reqwest::Client, Error> {
    http::client(
        PROVIDER,
        ClientOptions::new(config.connect_timeout)
            .read_timeout(config.stream_idle_timeout)
            .user_agent(USER_AGENT_VALUE),
    )
}

async fn rest<B: Serialize>(
    http: &reqwest::Client,
    method: Method,
    url: Url,
    key: &SecretString,
    body: Option<&B>,
    timeout: Duration,
) -> Result<reqwest::Response, CallError> {
    let mut key = HeaderValue::from_str(key.expose_secret())
        .map_err(|_| CallError::Protocol("the API key is not a valid header value".into()))?;
    key.set_sensitive(true);
    let mut req = http
        .request(method, url)
        .header("X-API-KEY", key)
        .header(USER_AGENT, USER_AGENT_VALUE)
        .timeout(timeout);
    if let Some(b) = body {
        let json = serde_json::to_vec(b)
            .map_err(|e| CallError::Protocol(format!("cannot encode the request: {e}")))?;
        req = req.header(CONTENT_TYPE, "application/json").body(json);
    }
    let resp = req.send().await.map_err(CallError::from_reqwest)?;
    if resp.status().is_success() {
        Ok(resp)
    } else {
        Err(connect::error_of(resp, timeout).await)
    }
}

/// The largest JSON answer read (a sandbox, a listing page, a file's info).
const MAX_JSON_BODY: usize = 16 << 20;

async fn json_of<T: DeserializeOwned>(
    resp: reqwest::Response,
    within: Duration,
) -> Result<T, CallError> {
    connect::read_json(resp, MAX_JSON_BODY, within, "an answer").await
}

/// What a create asks for: the spec over the configuration's defaults.
pub(crate) struct NewSandbox {
    pub template: String,
    pub timeout: Duration,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
}

/// The control plane (`X-API-KEY`).
pub(crate) struct ControlPlane<'a> {
    pub http: &'a reqwest::Client,
    pub base: Url,
    pub config: &'a E2bConfig,
}

impl ControlPlane<'_> {
    /// `POST /v2/sandboxes` (201), or the legacy `POST /sandboxes`.
    pub(crate) async fn create(&self, new: &NewSandbox) -> Result<wire::Sandbox, CallError> {
        let (path, secure) = match self.config.api_routes {
            ApiRoutes::V2 => ("v2/sandboxes", None),
            ApiRoutes::Legacy => ("sandboxes", Some(true)),
        };
        let body = wire::NewSandbox {
            template_id: &new.template,
            timeout: Some(new.timeout.as_secs().max(1)),
            metadata: &new.metadata,
            env_vars: &new.env,
            secure,
        };
        let resp = self.post(path, &body).await?;
        json_of(resp, self.config.request_timeout).await
    }

    /// `GET /v2/sandboxes?metadata=…&state=running,paused`, every page (`X-Next-Token`).
    ///
    /// The metadata filter is encoded as the SDK encodes it (`sandbox_async/paginator.py`: each
    /// key and value `quote`d, then the pairs `urlencode`d, so each is escaped twice, and the
    /// whole sent as one query value), which the API decodes three times (the query string,
    /// then `infra` `utils/sandboxes_list.go` `parseFilters` unescapes the value, splits it on
    /// `&` and `=`, and unescapes each part).
    pub(crate) async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<wire::ListedSandbox>, CallError> {
        let filter = metadata
            .iter()
            .map(|(k, v)| {
                let twice = |s: &str| escape_path_segment(&escape_path_segment(s));
                format!("{}={}", twice(k), twice(v))
            })
            .collect::<Vec<_>>()
            .join("&");
        let mut query = vec![("state", "running,paused")];
        if !filter.is_empty() {
            query.push(("metadata", &filter));
        }
        self.pages("v2/sandboxes", &query).await
    }

    /// Every page of a `GET` listing at `path` with `query`: each page asks for the next with
    /// `nextToken`, the token the previous page's `x-next-token` header gave; an empty page or no
    /// token ends it.
    async fn pages<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Vec<T>, CallError> {
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut url = join(&self.base, path);
            {
                let mut q = url.query_pairs_mut();
                q.extend_pairs(query);
                if let Some(token) = &next {
                    q.append_pair("nextToken", token);
                }
            }
            let resp = self.send::<()>(Method::GET, url, None).await?;
            next = resp
                .headers()
                .get("x-next-token")
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_owned);
            let page: Vec<T> = json_of(resp, self.config.request_timeout).await?;
            let empty = page.is_empty();
            out.extend(page);
            if next.is_none() || empty {
                return Ok(out);
            }
        }
    }

    /// `POST /v2/sandboxes/{id}/connect` (200 running, 201 resumed), or the legacy route.
    pub(crate) async fn connect(&self, id: &str) -> Result<wire::Sandbox, CallError> {
        let path = match self.config.api_routes {
            ApiRoutes::V2 => format!("v2/sandboxes/{}/connect", escape_path_segment(id)),
            ApiRoutes::Legacy => format!("sandboxes/{}/connect", escape_path_segment(id)),
        };
        let body = wire::ConnectSandbox {
            timeout: Some(self.config.sandbox_timeout.as_secs().max(1)),
        };
        let resp = self.post(&path, &body).await?;
        json_of(resp, self.config.request_timeout).await
    }

    /// `DELETE /sandboxes/{id}`: true when killed, false when it did not exist (404).
    pub(crate) async fn kill(&self, id: &str) -> Result<bool, CallError> {
        self.delete(&format!("sandboxes/{}", escape_path_segment(id)))
            .await
    }

    /// `POST /sandboxes/{id}/timeout` (204).
    pub(crate) async fn set_timeout(&self, id: &str, timeout: Duration) -> Result<(), CallError> {
        #[derive(Serialize)]
        struct Body {
            timeout: u64,
        }
        rest(
            self.http,
            Method::POST,
            join(
                &self.base,
                &format!("sandboxes/{}/timeout", escape_path_segment(id)),
            ),
            &self.config.api_key,
            Some(&Body {
                timeout: timeout.as_secs().max(1),
            }),
            self.config.request_timeout,
        )
        .await
        .map(drop)
    }
}

impl ControlPlane<'_> {
    async fn post<B: Serialize>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<reqwest::Response, CallError> {
        self.send(Method::POST, join(&self.base, path), Some(body))
            .await
    }

    /// `method` on `url` with the API key, bounded by the request timeout.
    async fn send<B: Serialize>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<reqwest::Response, CallError> {
        rest(
            self.http,
            method,
            url,
            &self.config.api_key,
            body,
            self.config.request_timeout,
        )
        .await
    }

    /// `DELETE` of `path`: true when deleted, false when it did not exist (404).
    async fn delete(&self, path: &str) -> Result<bool, CallError> {
        match self
            .send::<()>(Method::DELETE, join(&self.base, path), None)
            .await
        {
            Ok(_) => Ok(true),
            Err(CallError::Http { status: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET /sandboxes/{id}` (`SandboxDetail`: its `state`).
    pub(crate) async fn get(&self, id: &str) -> Result<wire::ListedSandbox, CallError> {
        let url = join(
            &self.base,
            &format!("sandboxes/{}", escape_path_segment(id)),
        );
        let resp = self.send::<()>(Method::GET, url, None).await?;
        json_of(resp, self.config.request_timeout).await
    }

    /// `POST /sandboxes/{id}/pause` (204); `false` when it was paused already (409, as the SDK
    /// reads it).
    pub(crate) async fn pause(&self, id: &str, memory: Option<bool>) -> Result<bool, CallError> {
        let path = format!("sandboxes/{}/pause", escape_path_segment(id));
        match self.post(&path, &wire::PauseSandbox { memory }).await {
            Ok(_) => Ok(true),
            Err(CallError::Http {
                status: 409,
                message,
                ..
            }) if message.contains("already paused") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `POST /sandboxes/{id}/snapshots` (201 `SnapshotInfo`).
    pub(crate) async fn snapshot(
        &self,
        id: &str,
        name: Option<&str>,
    ) -> Result<wire::SnapshotInfo, CallError> {
        let path = format!("sandboxes/{}/snapshots", escape_path_segment(id));
        let resp = self.post(&path, &wire::SnapshotSandbox { name }).await?;
        json_of(resp, self.config.request_timeout).await
    }

    /// `GET /snapshots?sandboxID=`, every page (`x-next-token`).
    pub(crate) async fn snapshots(
        &self,
        sandbox: Option<&str>,
    ) -> Result<Vec<wire::SnapshotInfo>, CallError> {
        let query: Vec<_> = sandbox.map(|s| ("sandboxID", s)).into_iter().collect();
        self.pages("snapshots", &query).await
    }

    /// `DELETE /templates/{id}` (204); `false` when it did not exist (404).
    pub(crate) async fn delete_template(&self, id: &str) -> Result<bool, CallError> {
        self.delete(&format!("templates/{}", escape_path_segment(id)))
            .await
    }

    /// `POST /sandboxes/{id}/fork` with `count: 1` (201, one `SandboxForkResult`).
    pub(crate) async fn fork(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<wire::ForkResult, CallError> {
        let path = format!("sandboxes/{}/fork", escape_path_segment(id));
        let body = wire::ForkSandbox {
            timeout: timeout.as_secs().max(1),
            count: 1,
        };
        let resp = self.post(&path, &body).await?;
        let mut results: Vec<wire::ForkResult> = json_of(resp, self.config.request_timeout).await?;
        if results.len() != 1 {
            return Err(CallError::Protocol(format!(
                "a fork of one sandbox answered {} results",
                results.len()
            )));
        }
        Ok(results.remove(0))
    }
}

/// What `/health` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// 2xx: envd answered.
    Running,
    /// The proxy says the sandbox was not found.
    Gone,
    /// No conclusive answer.
    Unknown,
}

/// One sandbox's envd.
pub(crate) struct Envd {
    pub http: reqwest::Client,
    pub base: Url,
    /// Routing, access token, user, User-Agent (secrets marked sensitive).
    pub headers: HeaderMap,
    pub request_timeout: Duration,
    pub keepalive: Duration,
    /// The longest wait for one complete stream message (keepalives included).
    pub idle: Duration,
    /// envd ≥ 0.5.7 takes `application/octet-stream` uploads.
    pub octet_stream_upload: bool,
}

execseam_adapter_kit::debug_fields!(self => Envd { base: self.base.as_str() });

impl Envd {
    /// The headers every envd request carries.
    pub(crate) fn headers_for(
        sandbox_id: &str,
        access_token: Option<&SecretString>,
        user: Option<&str>,
    ) -> Result<HeaderMap, String> {
        let mut h = HeaderMap::new();
        let id = HeaderValue::from_str(sandbox_id)
            .map_err(|_| format!("sandbox id {sandbox_id:?} is not a valid header value"))?;
        h.insert(HeaderName::from_static("e2b-sandbox-id"), id);
        h.insert(
            HeaderName::from_static("e2b-sandbox-port"),
            HeaderValue::from(ENVD_PORT),
        );
        if let Some(token) = access_token {
            let mut v = HeaderValue::from_str(token.expose_secret())
                .map_err(|_| "the envd access token is not a valid header value".to_owned())?;
            v.set_sensitive(true);
            h.insert(HeaderName::from_static("x-access-token"), v);
        }
        if let Some(user) = user {
            let mut v = HeaderValue::from_str(&format!("Basic {}", B64.encode(format!("{user}:"))))
                .map_err(|_| format!("user {user:?} is not a valid header value"))?;
            v.set_sensitive(true);
            h.insert(AUTHORIZATION, v);
        }
        h.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        Ok(h)
    }

    fn url(&self, path: &str) -> Url {
        join(&self.base, path)
    }

    /// `process.Process/Start`; `deadline` becomes `Connect-Timeout-Ms` (envd kills the process
    /// when it fires).
    pub(crate) async fn start(
        &self,
        req: &wire::StartRequest,
        deadline: Option<Duration>,
    ) -> Result<ServerStream, CallError> {
        self.events("process.Process/Start", req, deadline).await
    }

    /// `process.Process/Connect`: the process's events from now on (its start event first; an
    /// ended process's retained end event only, for 30 s, envd `service.go`).
    pub(crate) async fn connect(
        &self,
        process: wire::ProcessSelector,
    ) -> Result<ServerStream, CallError> {
        let req = wire::ProcessRequest { process };
        self.events("process.Process/Connect", &req, None).await
    }

    /// A process event stream with the SDK's keepalive header.
    async fn events<Req: Serialize>(
        &self,
        method: &str,
        req: &Req,
        deadline: Option<Duration>,
    ) -> Result<ServerStream, CallError> {
        let mut headers = self.headers.clone();
        headers.insert(
            HeaderName::from_static("keepalive-ping-interval"),
            HeaderValue::from(self.keepalive.as_secs().max(1)),
        );
        connect::server_stream(
            &self.http,
            self.url(method),
            headers,
            req,
            deadline,
            self.idle,
        )
        .await
    }

    async fn unary<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        method: &str,
        req: &Req,
    ) -> Result<Resp, CallError> {
        connect::unary(
            &self.http,
            self.url(method),
            self.headers.clone(),
            req,
            Some(self.request_timeout),
        )
        .await
    }

    /// `process.Process/SendInput`.
    pub(crate) async fn send_input(
        &self,
        process: wire::ProcessSelector,
        data: &[u8],
    ) -> Result<(), CallError> {
        let req = wire::SendInputRequest {
            process,
            input: wire::ProcessInput {
                stdin: B64.encode(data),
            },
        };
        self.unary::<_, wire::Empty>("process.Process/SendInput", &req)
            .await
            .map(drop)
    }

    /// `process.Process/StreamInput`: every chunk in one request, each encoded as it is sent.
    pub(crate) async fn stream_input(
        &self,
        process: wire::ProcessSelector,
        data: Bytes,
        chunk: usize,
    ) -> Result<(), CallError> {
        let start = wire::StreamInputRequest::Start { process };
        let chunks = (0..data.len()).step_by(chunk).map(move |at| {
            let piece = &data[at..data.len().min(at + chunk)];
            wire::StreamInputRequest::Data {
                input: wire::ProcessInput {
                    stdin: B64.encode(piece),
                },
            }
        });
        // No deadline: envd writes to the pipe as fast as the process reads, which may take
        // longer than any request timeout (the exec's own deadline, if any, bounds it).
        connect::client_stream::<_, wire::Empty>(
            &self.http,
            self.url("process.Process/StreamInput"),
            self.headers.clone(),
            std::iter::once(start).chain(chunks),
            None,
        )
        .await
        .map(drop)
    }

    /// `process.Process/CloseStdin` (envd ≥ 0.5.2).
    pub(crate) async fn close_stdin(
        &self,
        process: wire::ProcessSelector,
    ) -> Result<(), CallError> {
        self.unary::<_, wire::Empty>(
            "process.Process/CloseStdin",
            &wire::ProcessRequest { process },
        )
        .await
        .map(drop)
    }

    /// The pid of the process with `tag`, from `process.Process/List`, if envd tracks it.
    pub(crate) async fn pid_of_tag(&self, tag: &str) -> Result<Option<u32>, CallError> {
        let list: wire::ListResponse = self
            .unary("process.Process/List", &serde_json::json!({}))
            .await?;
        Ok(list
            .processes
            .iter()
            .find(|p| p.tag.as_deref() == Some(tag))
            .map(|p| p.pid))
    }

    /// `process.Process/SendSignal` with `SIGNAL_SIGKILL`.
    pub(crate) async fn kill(&self, process: wire::ProcessSelector) -> Result<(), CallError> {
        self.unary::<_, wire::Empty>(
            "process.Process/SendSignal",
            &wire::SendSignalRequest {
                process,
                signal: "SIGNAL_SIGKILL",
            },
        )
        .await
        .map(drop)
    }

    /// `filesystem.Filesystem/ListDir`.
    pub(crate) async fn list_dir(
        &self,
        path: &str,
        depth: u32,
    ) -> Result<Vec<wire::EntryInfo>, CallError> {
        let r: wire::ListDirResponse = self
            .unary(
                "filesystem.Filesystem/ListDir",
                &wire::ListDirRequest { path, depth },
            )
            .await?;
        Ok(r.entries)
    }

    /// `filesystem.Filesystem/Stat`.
    pub(crate) async fn stat(&self, path: &str) -> Result<wire::EntryInfo, CallError> {
        let r: wire::StatResponse = self
            .unary("filesystem.Filesystem/Stat", &wire::StatRequest { path })
            .await?;
        r.entry
            .ok_or_else(|| CallError::Protocol("a Stat answer without an entry".into()))
    }

    fn files_url(&self, path: &str, user: Option<&str>) -> Url {
        let mut u = self.url("files");
        {
            let mut q = u.query_pairs_mut();
            q.append_pair("path", path);
            if let Some(user) = user {
                q.append_pair("username", user);
            }
        }
        u
    }

    /// `GET /files?path=`: the file's bytes.
    pub(crate) async fn read_file(
        &self,
        path: &str,
        user: Option<&str>,
    ) -> Result<Bytes, CallError> {
        let resp = self
            .http
            .get(self.files_url(path, user))
            .headers(self.headers.clone())
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(CallError::from_reqwest)?;
        if !resp.status().is_success() {
            return Err(connect::error_of(resp, self.request_timeout).await);
        }
        resp.bytes().await.map_err(CallError::from_reqwest)
    }

    /// `POST /files?path=`: octet-stream (envd ≥ 0.5.7) or multipart with the part named `file`.
    pub(crate) async fn write_file(
        &self,
        path: &str,
        data: Bytes,
        user: Option<&str>,
    ) -> Result<wire::WriteInfo, CallError> {
        let req = self
            .http
            .post(self.files_url(path, user))
            .headers(self.headers.clone())
            .timeout(self.request_timeout);
        let req = if self.octet_stream_upload {
            req.header(CONTENT_TYPE, "application/octet-stream")
                .body(data)
        } else {
            let boundary = format!("execseam{:016x}", execseam_adapter_kit::id::random_u64());
            let mut body = Vec::with_capacity(data.len() + 256);
            let name = path.replace('"', "%22").replace(['\r', '\n'], "");
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(&data);
            body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            req.header(
                CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
        };
        let resp = req.send().await.map_err(CallError::from_reqwest)?;
        if !resp.status().is_success() {
            return Err(connect::error_of(resp, self.request_timeout).await);
        }
        let infos: Vec<wire::WriteInfo> = json_of(resp, self.request_timeout).await?;
        infos.into_iter().next().ok_or_else(|| {
            CallError::Protocol("POST /files answered without the written file".into())
        })
    }

    /// `GET /health`: 204 when envd answers; the proxy's 502 "was not found" when the sandbox
    /// is gone.
    pub(crate) async fn health(&self) -> Health {
        let resp = self
            .http
            .get(self.url("health"))
            .headers(self.headers.clone())
            .timeout(HEALTH_TIMEOUT)
            .send()
            .await;
        let Ok(resp) = resp else {
            return Health::Unknown;
        };
        if resp.status().is_success() {
            return Health::Running;
        }
        match connect::error_of(resp, HEALTH_TIMEOUT).await {
            CallError::Http {
                status: 502,
                message,
                ..
            } if message.contains(crate::error::SANDBOX_NOT_FOUND) => Health::Gone,
            _ => Health::Unknown,
        }
    }
}
