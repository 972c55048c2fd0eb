//! HTTP and WebSocket calls to Daytona's control plane and to a sandbox's toolbox.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::http::{self, ClientOptions, Refusal};
use execseam_adapter_kit::{json, vars, ws};
use execseam_core::{Error, ErrorKind};
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use secrecy::ExposeSecret;
use serde::de::DeserializeOwned;

use crate::config::DaytonaConfig;
use crate::error::{self, PROVIDER};
use crate::wire;
use execseam_adapter_kit::retry::Stage;

/// The multipart boundary we send uploads with.
const UPLOAD_BOUNDARY: &str = "execseam-daytona-upload-7d1c9e";

/// A WebSocket over a reqwest upgrade (HTTP/1.1, TLS where the URL says https).
pub(crate) type Ws = ws::Socket;

/// The most of a log answer read for `max_output` bytes per stream: the log carries both
/// streams in base64 lines (4/3), each line with its prefix, plus the trailers.
pub(crate) fn log_limit(max_output: u64) -> usize {
    usize::try_from(max_output)
        .unwrap_or(usize::MAX / 4)
        .saturating_mul(3)
        .saturating_add(1 << 20)
}

/// Reads at most `limit` bytes of a body within `within`; more is an `OutputLimit` error (with
/// `stage`'s retry class), a broken or stalled body the transport error.
pub(crate) async fn read_limited(
    resp: Response,
    limit: usize,
    within: Duration,
    operation: &'static str,
    stage: Stage,
) -> Result<Bytes, Error> {
    http::read_body(resp, limit, within)
        .await
        .map_err(|e| e.into_error(error::call(operation, stage)))
}

/// The most of an output-carrying answer (`process/execute`, a synchronous session exec) kept
/// besides its output fields (`exitCode`, `cmdId`, and whatever a newer daemon adds).
const ANSWER_REST_LIMIT: usize = 64 << 10;

/// The operation and stage of a `process/execute` request: the exec's own, or a helper's.
fn execute_op(submit: bool) -> (&'static str, Stage) {
    if submit {
        ("exec", Stage::Submit)
    } else {
        ("exec_probe", Stage::After)
    }
}

/// Why a streamed answer ended early: its body failed, or what it carried was refused.
enum Fed {
    Body(http::BodyError),
    Error(Error),
}

impl From<http::BodyError> for Fed {
    fn from(e: http::BodyError) -> Fed {
        Fed::Body(e)
    }
}

/// No total bound (an answer that lasts as long as its command): the caller watches it.
const UNBOUNDED: Duration = Duration::MAX;

/// The authenticated HTTP client, shared by the control plane and the toolbox.
#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    ws: reqwest::Client,
    headers: HeaderMap,
    api_url: String,
    request_timeout: Duration,
    /// The most of a command's log read in one answer.
    pub(crate) max_log: usize,
    /// The most of any other answer, and of a log-stream message, read.
    pub(crate) max_answer: usize,
    /// The most output an exec collects per stream.
    pub(crate) max_output: u64,
    /// The longest silence before the adapter asks whether the command ended.
    pub(crate) idle_timeout: Duration,
}

impl Client {
    pub(crate) fn new(config: &DaytonaConfig) -> Result<Client, Error> {
        let mut headers = HeaderMap::new();
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", config.token.expose_secret()))
            .map_err(|_| {
            vars::config_error(PROVIDER, "the token is not a valid header value")
        })?;
        auth.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, auth);
        headers.insert(
            wire::SOURCE_HEADER,
            HeaderValue::from_static("sdk-execseam"),
        );
        headers.insert(
            wire::SDK_VERSION_HEADER,
            HeaderValue::from_static(wire::SDK_VERSION),
        );
        if let Some(org) = &config.organization_id {
            headers.insert(
                wire::ORGANIZATION_HEADER,
                HeaderValue::from_str(org).map_err(|_| {
                    vars::config_error(PROVIDER, "the organization id is not a valid header value")
                })?,
            );
        }
        // Never re-send anything by itself: a re-sent exec could run twice.
        let options = ClientOptions::new(config.connect_timeout);
        Ok(Client {
            http: http::client(PROVIDER, options.clone())?,
            ws: http::client(PROVIDER, options.http1_only())?,
            headers,
            api_url: config.api_url.trim_end_matches('/').to_owned(),
            request_timeout: config.request_timeout,
            max_log: log_limit(config.max_output),
            max_answer: config.max_answer_bytes,
            max_output: config.max_output,
            idle_timeout: config.idle_timeout,
        })
    }

    fn request(&self, method: Method, url: &str, timeout: bool) -> RequestBuilder {
        let rb = self.http.request(method, url).headers(self.headers.clone());
        if timeout {
            rb.timeout(self.request_timeout)
        } else {
            rb
        }
    }

    /// Sends and maps every non-2xx answer to an error.
    async fn send(
        &self,
        rb: RequestBuilder,
        operation: &'static str,
        stage: Stage,
    ) -> Result<Response, Error> {
        let resp = rb
            .send()
            .await
            .map_err(|e| error::from_transport(e, operation, stage))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let r = Refusal::read(resp, self.request_timeout).await;
        Err(error::from_response(
            r.status, &r.headers, &r.body, operation, stage,
        ))
    }

    /// A JSON (or file) answer, at most `DaytonaConfig::max_answer_bytes` of it.
    async fn body(
        &self,
        resp: Response,
        operation: &'static str,
        stage: Stage,
    ) -> Result<Bytes, Error> {
        read_limited(
            resp,
            self.max_answer,
            self.request_timeout,
            operation,
            stage,
        )
        .await
    }

    async fn json<T: DeserializeOwned>(
        &self,
        resp: Response,
        operation: &'static str,
        stage: Stage,
    ) -> Result<T, Error> {
        let body = self.body(resp, operation, stage).await?;
        parse_json(&body, operation)
    }

    // -----------------------------------------------------------------------------------------
    // Control plane

    pub(crate) async fn create_sandbox(
        &self,
        body: &wire::CreateSandbox,
    ) -> Result<wire::Sandbox, Error> {
        let rb = self
            .request(Method::POST, &format!("{}/sandbox", self.api_url), true)
            .json(body);
        // Not idempotent: a cut after the send may have made the sandbox (`Unsafe`, which the
        // kit's create guard sweeps by its tag); `Before` called it `Safe`, and a retry made a
        // second sandbox.
        let resp = self.send(rb, "create_sandbox", Stage::Submit).await?;
        self.json(resp, "create_sandbox", Stage::Submit).await
    }

    pub(crate) async fn get_sandbox(&self, id: &str) -> Result<wire::Sandbox, Error> {
        let url = format!("{}/sandbox/{}", self.api_url, path_segment(id));
        let resp = self
            .send(
                self.request(Method::GET, &url, true),
                "get_sandbox",
                Stage::Before,
            )
            .await?;
        self.json(resp, "get_sandbox", Stage::Before).await
    }

    pub(crate) async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        let url = format!("{}/sandbox/{}", self.api_url, path_segment(id));
        self.send(
            self.request(Method::DELETE, &url, true),
            "delete_sandbox",
            Stage::Before,
        )
        .await
        .map(drop)
    }

    /// `GET /sandbox/paginated?labels=<JSON>&page=N&limit=100`, every page (the SDKs send the
    /// labels as `json.dumps(labels)`).
    pub(crate) async fn list_sandboxes(
        &self,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<wire::Sandbox>, Error> {
        const OP: &str = "list_sandboxes";
        let labels = serde_json::to_string(labels).unwrap_or_else(|_| "{}".into());
        let mut out = Vec::new();
        let mut page = 1u32;
        loop {
            let page_s = page.to_string();
            let url = format!(
                "{}/sandbox/paginated{}",
                self.api_url,
                query_string(&[("labels", &labels), ("page", &page_s), ("limit", "100")])
            );
            let resp = self
                .send(self.request(Method::GET, &url, true), OP, Stage::Before)
                .await?;
            let p: wire::SandboxPage = self.json(resp, OP, Stage::Before).await?;
            let empty = p.items.is_empty();
            out.extend(p.items);
            if empty || page >= p.total_pages {
                return Ok(out);
            }
            page += 1;
        }
    }

    /// `POST /sandbox/{id}/{action}` (`stop`, `start`, `autodelete/-1`, …) with an optional JSON
    /// body; the answer is the sandbox.
    pub(crate) async fn sandbox_action<B: serde::Serialize + ?Sized>(
        &self,
        id: &str,
        action: &str,
        body: Option<&B>,
        operation: &'static str,
    ) -> Result<wire::Sandbox, Error> {
        let url = format!("{}/sandbox/{}/{action}", self.api_url, path_segment(id));
        let mut rb = self.request(Method::POST, &url, true);
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let resp = self.send(rb, operation, Stage::Submit).await?;
        self.json(resp, operation, Stage::Submit).await
    }

    /// `GET /snapshots/{idOrName}`; `None` when there is none (404).
    pub(crate) async fn get_snapshot(&self, id: &str) -> Result<Option<wire::Snapshot>, Error> {
        const OP: &str = "get_snapshot";
        let url = format!("{}/snapshots/{}", self.api_url, path_segment(id));
        match self
            .send(self.request(Method::GET, &url, true), OP, Stage::Before)
            .await
        {
            Ok(resp) => self.json(resp, OP, Stage::Before).await.map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /snapshots?sourceSandboxId=&page=N&limit=100`, every page.
    pub(crate) async fn list_snapshots(
        &self,
        source: Option<&str>,
    ) -> Result<Vec<wire::Snapshot>, Error> {
        const OP: &str = "list_snapshots";
        let mut out = Vec::new();
        let mut page = 1u32;
        loop {
            let page_s = page.to_string();
            let mut q = vec![("page", page_s.as_str()), ("limit", "100")];
            if let Some(s) = source {
                q.push(("sourceSandboxId", s));
            }
            let url = format!("{}/snapshots{}", self.api_url, query_string(&q));
            let resp = self
                .send(self.request(Method::GET, &url, true), OP, Stage::Before)
                .await?;
            let p: wire::SnapshotPage = self.json(resp, OP, Stage::Before).await?;
            let empty = p.items.is_empty();
            out.extend(p.items);
            if empty || page >= p.total_pages {
                return Ok(out);
            }
            page += 1;
        }
    }

    /// `DELETE /snapshots/{id}` (the UUID); one already gone (404) is `Ok`.
    pub(crate) async fn delete_snapshot(&self, id: &str) -> Result<(), Error> {
        const OP: &str = "delete_snapshot";
        let url = format!("{}/snapshots/{}", self.api_url, path_segment(id));
        match self
            .send(self.request(Method::DELETE, &url, true), OP, Stage::Before)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `GET /sandbox/{id}/ports/{port}/preview-url`.
    /// `GET /sandbox/{id}/ports/{port}/preview-url`, or with `signed` its
    /// `signed-preview-url?expiresInSeconds=` (the same two fields used).
    pub(crate) async fn preview_url(
        &self,
        id: &str,
        port: u16,
        signed: Option<Duration>,
    ) -> Result<wire::PortPreviewUrl, Error> {
        const OP: &str = "expose";
        let route = match signed {
            None => "preview-url".to_owned(),
            Some(t) => format!("signed-preview-url?expiresInSeconds={}", t.as_secs()),
        };
        let url = format!(
            "{}/sandbox/{}/ports/{port}/{route}",
            self.api_url,
            path_segment(id)
        );
        let resp = self
            .send(self.request(Method::GET, &url, true), OP, Stage::Before)
            .await?;
        self.json(resp, OP, Stage::Before).await
    }

    pub(crate) async fn toolbox_proxy_url(&self, id: &str) -> Result<String, Error> {
        let url = format!(
            "{}/sandbox/{}/toolbox-proxy-url",
            self.api_url,
            path_segment(id)
        );
        let resp = self
            .send(
                self.request(Method::GET, &url, true),
                "get_toolbox_proxy_url",
                Stage::Before,
            )
            .await?;
        let u: wire::ToolboxProxyUrl = self
            .json(resp, "get_toolbox_proxy_url", Stage::Before)
            .await?;
        Ok(u.url)
    }
}

/// One sandbox's toolbox: `{toolboxProxyUrl}/{sandboxId}/…`. The proxy URL is known (the
/// sandbox's DTO named it, or the configuration does) or asked of the API on first use
/// (`GET /sandbox/{id}/toolbox-proxy-url`, as the SDK does for list items).
#[derive(Clone)]
pub(crate) struct Toolbox {
    client: Arc<Client>,
    sandbox_id: String,
    base: Arc<tokio::sync::OnceCell<String>>,
}

impl Toolbox {
    pub(crate) fn new(
        client: Arc<Client>,
        toolbox_proxy_url: Option<&str>,
        sandbox_id: &str,
    ) -> Toolbox {
        let base = match toolbox_proxy_url {
            Some(url) => tokio::sync::OnceCell::new_with(Some(Toolbox::base_of(url, sandbox_id))),
            None => tokio::sync::OnceCell::new(),
        };
        Toolbox {
            client,
            sandbox_id: sandbox_id.to_owned(),
            base: Arc::new(base),
        }
    }

    fn base_of(toolbox_proxy_url: &str, sandbox_id: &str) -> String {
        format!(
            "{}/{}",
            toolbox_proxy_url.trim_end_matches('/'),
            path_segment(sandbox_id)
        )
    }

    async fn url(&self, path: &str) -> Result<String, Error> {
        let base = self
            .base
            .get_or_try_init(|| async {
                let url = self.client.toolbox_proxy_url(&self.sandbox_id).await?;
                Ok::<_, Error>(Toolbox::base_of(&url, &self.sandbox_id))
            })
            .await?;
        Ok(format!("{base}{path}"))
    }

    /// A bodiless toolbox request (`path` under the sandbox's toolbox), with the request timeout.
    async fn call(
        &self,
        method: Method,
        path: &str,
        op: &'static str,
        stage: Stage,
    ) -> Result<Response, Error> {
        let url = self.url(path).await?;
        self.client
            .send(self.client.request(method, &url, true), op, stage)
            .await
    }

    pub(crate) async fn create_session(&self, session_id: &str) -> Result<(), Error> {
        let rb = self
            .client
            .request(Method::POST, &self.url("/process/session").await?, true)
            .json(&wire::CreateSessionRequest { session_id });
        self.client
            .send(rb, "create_session", Stage::Before)
            .await
            .map(drop)
    }

    pub(crate) async fn delete_session(&self, session_id: &str) -> Result<(), Error> {
        let path = format!("/process/session/{}", path_segment(session_id));
        self.call(Method::DELETE, &path, "delete_session", Stage::Before)
            .await
            .map(drop)
    }

    /// The request that runs the command with `runAsync`; never re-sent. Answered at once (a
    /// 202 with the command's id), within the request timeout.
    pub(crate) async fn session_exec_async(
        &self,
        session_id: &str,
        command: &str,
    ) -> Result<wire::SessionExecuteResponse, Error> {
        let resp = self.session_submit(session_id, command, true).await?;
        let body = read_limited(
            resp,
            self.client.max_answer,
            self.client.request_timeout,
            "exec",
            Stage::Submit,
        )
        .await?;
        parse_json(&body, "exec")
    }

    /// The request that runs the command and answers when it ends (however long that is: the
    /// caller watches the session); never re-sent. The answer carries the whole output in
    /// string fields: each of `fields` goes to `output` (with its index) as it arrives, never
    /// held whole. The answer's other fields, and which of `fields` it had.
    pub(crate) async fn session_exec_sync(
        &self,
        session_id: &str,
        command: &str,
        fields: &[&'static str],
        output: impl FnMut(usize, &[u8]) -> Result<(), Error>,
    ) -> Result<(wire::SessionExecuteResponse, Vec<bool>), Error> {
        let resp = self.session_submit(session_id, command, false).await?;
        let (rest, found) = scan_answer(resp, "exec", fields, output).await?;
        Ok((parse_json(&rest, "exec")?, found))
    }

    async fn session_submit(
        &self,
        session_id: &str,
        command: &str,
        run_async: bool,
    ) -> Result<Response, Error> {
        let url = self
            .url(&format!(
                "/process/session/{}/exec",
                path_segment(session_id)
            ))
            .await?;
        let body = wire::SessionExecuteRequest {
            command,
            run_async: run_async.then_some(true),
        };
        let rb = self
            .client
            .request(Method::POST, &url, run_async)
            .json(&body);
        let resp = self.client.send(rb, "exec", Stage::Submit).await?;
        let expected = if run_async {
            StatusCode::ACCEPTED
        } else {
            StatusCode::OK
        };
        if resp.status() != expected {
            return Err(error::protocol(
                "exec",
                format!(
                    "the session exec answered {} where {} was expected",
                    resp.status().as_u16(),
                    expected.as_u16()
                ),
            ));
        }
        Ok(resp)
    }

    /// `POST /process/execute` of a short helper (a probe, a kill): runs `command` and answers
    /// when it ends, within the request timeout.
    pub(crate) async fn execute(
        &self,
        command: &str,
        timeout_secs: u64,
    ) -> Result<wire::ExecuteResponse, Error> {
        let (op, stage) = execute_op(false);
        let resp = self
            .execute_answer(command, &[], timeout_secs, false)
            .await?;
        let body = read_limited(
            resp,
            self.client.max_answer,
            self.client.request_timeout,
            op,
            stage,
        )
        .await?;
        parse_json(&body, op)
    }

    /// `POST /process/execute` with variables added to the shell's environment, its `result`
    /// given to `result` as it arrives (never held whole: the caller keeps what it decodes);
    /// the answer's `exitCode` and whether it had a `result`.
    pub(crate) async fn execute_framed(
        &self,
        command: &str,
        envs: &[(&str, &str)],
        timeout_secs: u64,
        mut result: impl FnMut(&[u8]) -> Result<(), Error>,
    ) -> Result<(Option<i32>, bool), Error> {
        const OP: &str = "exec";
        let resp = self
            .execute_answer(command, envs, timeout_secs, true)
            .await?;
        let (rest, found) = scan_answer(resp, OP, &["result"], |_, b| result(b)).await?;
        let answer: wire::ExecuteResponse = parse_json(&rest, OP)?;
        Ok((answer.exit_code, found[0]))
    }

    /// Sends `POST /process/execute`: its answer once it is a 200.
    async fn execute_answer(
        &self,
        command: &str,
        envs: &[(&str, &str)],
        timeout_secs: u64,
        submit: bool,
    ) -> Result<Response, Error> {
        let (op, stage) = execute_op(submit);
        let rb = self
            .client
            .request(Method::POST, &self.url("/process/execute").await?, !submit)
            .json(&wire::ExecuteRequest {
                command,
                envs: envs.iter().copied().collect(),
                timeout: timeout_secs,
            });
        let resp = self.client.send(rb, op, stage).await?;
        if resp.status() != StatusCode::OK {
            return Err(error::protocol(
                op,
                format!(
                    "process/execute answered {} where 200 was expected",
                    resp.status().as_u16()
                ),
            ));
        }
        Ok(resp)
    }

    /// `GET /process/session/{id}`: the session's commands (an exec's session has one).
    pub(crate) async fn get_session(&self, session_id: &str) -> Result<wire::SessionInfo, Error> {
        const OP: &str = "get_session";
        let path = format!("/process/session/{}", path_segment(session_id));
        let resp = self.call(Method::GET, &path, OP, Stage::After).await?;
        self.client.json(resp, OP, Stage::After).await
    }

    /// Client limits and timeouts.
    pub(crate) fn limits(&self) -> (u64, Duration) {
        (self.client.max_output, self.client.idle_timeout)
    }

    pub(crate) async fn get_command(
        &self,
        session_id: &str,
        command_id: &str,
    ) -> Result<wire::SessionCommand, Error> {
        let path = format!(
            "/process/session/{}/command/{}",
            path_segment(session_id),
            path_segment(command_id)
        );
        let resp = self
            .call(Method::GET, &path, "get_session_command", Stage::After)
            .await?;
        self.client
            .json(resp, "get_session_command", Stage::After)
            .await
    }

    /// The command's whole log so far (`GET …/logs`), raw with its line prefixes: the `output`
    /// of the JSON answer (SDK ≥ 0.167), or the `text/plain` body of older daemons.
    pub(crate) async fn logs(&self, session_id: &str, command_id: &str) -> Result<Vec<u8>, Error> {
        const OP: &str = "get_session_command_logs";
        let path = format!(
            "/process/session/{}/command/{}/logs",
            path_segment(session_id),
            path_segment(command_id)
        );
        let resp = self.call(Method::GET, &path, OP, Stage::After).await?;
        let json = http::content_type(resp.headers()).starts_with("application/json");
        let body = read_limited(
            resp,
            self.client.max_log,
            self.client.request_timeout,
            OP,
            Stage::After,
        )
        .await?;
        if !json {
            return Ok(body.to_vec());
        }
        let logs: wire::CommandLogs = parse_json(&body, OP)?;
        Ok(logs.output.unwrap_or_default().into_bytes())
    }

    /// Opens `…/logs?follow=true` as a WebSocket.
    pub(crate) async fn follow_logs(
        &self,
        session_id: &str,
        command_id: &str,
    ) -> Result<Ws, Error> {
        let path = format!(
            "/process/session/{}/command/{}/logs?follow=true",
            path_segment(session_id),
            path_segment(command_id)
        );
        self.websocket(&path, "follow_logs").await
    }

    /// Opens `path` under the toolbox as a WebSocket (over an HTTP/1.1 upgrade, so TLS and
    /// proxies are reqwest's), frames bounded by `max_answer` (a log message is a few lines of
    /// base64; the daemon's PTY broadcast sends what one read of the terminal gave, 32 KiB).
    async fn websocket(&self, path: &str, op: &'static str) -> Result<Ws, Error> {
        let url = self.url(path).await?;
        let request = self
            .client
            .ws
            .get(&url)
            .headers(self.client.headers.clone());
        let call = error::call(op, Stage::After);
        ws::upgrade(request, self.client.request_timeout, self.client.max_answer)
            .await
            .map(|up| up.socket)
            .map_err(|e| {
                e.into_error(call, |r| {
                    if (200..300).contains(&r.status) {
                        error::protocol(
                            op,
                            format!("{op} answered {} instead of a WebSocket upgrade", r.status),
                        )
                    } else {
                        error::from_response(r.status, &r.headers, &r.body, op, Stage::After)
                    }
                })
            })
    }

    // -----------------------------------------------------------------------------------------
    // PTY sessions (daemon `apps/daemon/pkg/toolbox/process/pty/controller.go`)

    /// `POST /process/pty`: the session's shell (`-i -l`) starts on a terminal of the size.
    pub(crate) async fn create_pty(
        &self,
        request: &wire::PtyCreateRequest<'_>,
    ) -> Result<(), Error> {
        const OP: &str = "create_pty_session";
        let rb = self
            .client
            .request(Method::POST, &self.url("/process/pty").await?, true)
            .json(request);
        let resp = self.client.send(rb, OP, Stage::Submit).await?;
        let created: wire::PtyCreateResponse = self.client.json(resp, OP, Stage::Submit).await?;
        if created.session_id != request.id {
            return Err(error::protocol(
                OP,
                format!(
                    "asked for PTY session {:?}, the daemon created {:?}",
                    request.id, created.session_id
                ),
            ));
        }
        Ok(())
    }

    /// `GET /process/pty/{id}/connect`: the session's output from now on (no replay), input.
    pub(crate) async fn connect_pty(&self, id: &str) -> Result<Ws, Error> {
        let path = format!("/process/pty/{}/connect", path_segment(id));
        self.websocket(&path, "connect_pty_session").await
    }

    /// `POST /process/pty/{id}/resize`.
    pub(crate) async fn resize_pty(&self, id: &str, size: wire::PtySize) -> Result<(), Error> {
        const OP: &str = "resize_pty_session";
        let url = self
            .url(&format!("/process/pty/{}/resize", path_segment(id)))
            .await?;
        let rb = self.client.request(Method::POST, &url, true).json(&size);
        self.client.send(rb, OP, Stage::Before).await.map(drop)
    }

    /// `DELETE /process/pty/{id}`: kills the session's process tree.
    pub(crate) async fn delete_pty(&self, id: &str) -> Result<(), Error> {
        let path = format!("/process/pty/{}", path_segment(id));
        self.call(Method::DELETE, &path, "delete_pty_session", Stage::Before)
            .await
            .map(drop)
    }

    // -----------------------------------------------------------------------------------------
    // Files

    /// `POST /files/bulk-upload`: `files[i].path` then `files[i].file` for each file.
    pub(crate) async fn upload(&self, files: &[(&str, &[u8])]) -> Result<(), Error> {
        const OP: &str = "upload_files";
        let mut body = Vec::new();
        for (i, (path, data)) in files.iter().enumerate() {
            body.extend_from_slice(
                format!(
                    "--{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name=\"files[{i}].path\"\r\n\r\n{path}\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(
                format!(
                    "--{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name=\"files[{i}].file\"; filename=\"{}\"\r\nContent-Type: application/octet-stream\r\n\r\n",
                    quote_filename(path)
                )
                .as_bytes(),
            );
            body.extend_from_slice(data);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{UPLOAD_BOUNDARY}--\r\n").as_bytes());
        let rb = self
            .client
            .request(Method::POST, &self.url("/files/bulk-upload").await?, true)
            .header(
                header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={UPLOAD_BOUNDARY}"),
            )
            .body(body);
        let resp = self.client.send(rb, OP, Stage::Before).await?;
        let bytes = self.client.body(resp, OP, Stage::Before).await?;
        // Old daemons answer with an empty body; newer ones list what they wrote.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let r: wire::UploadResponse = parse_json(&bytes, OP)?;
        if !r.errors.is_empty() {
            return Err(Error::new(ErrorKind::Internal, r.errors.join(", "))
                .with_provider(PROVIDER)
                .with_operation(OP));
        }
        Ok(())
    }

    /// `POST /files/bulk-download`: one part per path, in order; an `error` part is that file's
    /// error.
    pub(crate) async fn download(
        &self,
        paths: &[&str],
    ) -> Result<Vec<Result<Bytes, Error>>, Error> {
        const OP: &str = "download_files";
        let rb = self
            .client
            .request(Method::POST, &self.url("/files/bulk-download").await?, true)
            .header(header::ACCEPT, "multipart/form-data")
            .json(&wire::FilesDownloadRequest { paths });
        let resp = self.client.send(rb, OP, Stage::Before).await?;
        let ctype = http::content_type(resp.headers()).to_owned();
        let boundary = multipart_boundary(&ctype).ok_or_else(|| {
            error::protocol(
                OP,
                format!("unexpected Content-Type {ctype:?} for a bulk download"),
            )
            .with_retry(execseam_core::Retry::SAFE)
        })?;
        let body = self.client.body(resp, OP, Stage::Before).await?;
        let parts = parse_multipart(&body, &boundary)
            .map_err(|m| error::protocol(OP, m).with_retry(execseam_core::Retry::SAFE))?;
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            let part = parts.iter().find(|p| p.filename.as_deref() == Some(*path));
            out.push(match part {
                None => Err(error::protocol(
                    OP,
                    format!("the bulk download has no part for {path:?}"),
                )
                .with_retry(execseam_core::Retry::SAFE)),
                Some(p) if p.name.as_deref() == Some("file") => Ok(p.data.clone()),
                Some(p) => {
                    let status = serde_json::from_slice::<wire::ErrorResponse>(&p.data)
                        .ok()
                        .and_then(|e| e.status_code)
                        .unwrap_or(500);
                    Err(error::from_response(
                        status,
                        &HeaderMap::new(),
                        &p.data,
                        OP,
                        Stage::Before,
                    ))
                }
            });
        }
        Ok(out)
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        op: &'static str,
    ) -> Result<T, Error> {
        let rb = self.client.request(
            Method::GET,
            &format!("{}{}", self.url(path).await?, query_string(query)),
            true,
        );
        let resp = self.client.send(rb, op, Stage::Before).await?;
        self.client.json(resp, op, Stage::Before).await
    }

    pub(crate) async fn list(&self, path: &str) -> Result<Vec<wire::FileInfo>, Error> {
        self.get_json("/files", &[("path", path)], "list_files")
            .await
    }

    pub(crate) async fn info(&self, path: &str) -> Result<wire::FileInfo, Error> {
        self.get_json("/files/info", &[("path", path)], "get_file_info")
            .await
    }

    pub(crate) async fn find(&self, path: &str, pattern: &str) -> Result<Vec<wire::Match>, Error> {
        self.get_json(
            "/files/find",
            &[("path", path), ("pattern", pattern)],
            "find_in_files",
        )
        .await
    }

    pub(crate) async fn search(&self, path: &str, pattern: &str) -> Result<Vec<String>, Error> {
        let r: wire::SearchFilesResponse = self
            .get_json(
                "/files/search",
                &[("path", path), ("pattern", pattern)],
                "search_files",
            )
            .await?;
        Ok(r.files)
    }

    pub(crate) async fn delete_file(&self, path: &str, recursive: bool) -> Result<(), Error> {
        let rb = self.client.request(
            Method::DELETE,
            &format!(
                "{}{}",
                self.url("/files").await?,
                query_string(&[
                    ("path", path),
                    ("recursive", if recursive { "true" } else { "false" }),
                ])
            ),
            true,
        );
        self.client
            .send(rb, "delete_file", Stage::Before)
            .await
            .map(drop)
    }
}

fn parse_json<T: DeserializeOwned>(body: &[u8], operation: &'static str) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| {
        error::protocol(
            operation,
            format!(
                "malformed answer ({e}): {:?}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
        )
    })
}

/// Reads an answer that carries a command's output in the string `fields` of a JSON object as
/// it arrives (with no total bound: the caller watches it): each field's unescaped bytes go to
/// `output` with the field's index; the object without those values (at most
/// [`ANSWER_REST_LIMIT`]) and which fields it had.
async fn scan_answer(
    resp: Response,
    op: &'static str,
    fields: &[&'static str],
    mut output: impl FnMut(usize, &[u8]) -> Result<(), Error>,
) -> Result<(Vec<u8>, Vec<bool>), Error> {
    let mut scan = json::FieldScan::of(fields, ANSWER_REST_LIMIT);
    let malformed = |why: String| error::protocol(op, format!("malformed answer: {why}"));
    let fed = http::feed_body(resp, UNBOUNDED, |chunk| {
        scan.feed_fields(chunk, &mut output).map_err(|e| match e {
            json::ScanError::Malformed(why) => Fed::Error(malformed(why)),
            json::ScanError::Sink(e) => Fed::Error(e),
        })
    })
    .await;
    match fed {
        Ok(()) => {}
        Err(Fed::Body(e)) => return Err(e.into_error(error::call(op, Stage::Submit))),
        Err(Fed::Error(e)) => return Err(e),
    }
    scan.finish_fields::<String>().map_err(|e| match e {
        json::ScanError::Malformed(why) | json::ScanError::Sink(why) => malformed(why),
    })
}

/// Percent-encodes one path segment (ids are normally plain, but never trust that).
pub(crate) use execseam_adapter_kit::text::escape_path_segment as path_segment;

/// `?k=v&…`, each part percent-encoded.
fn query_string(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        s.push(if i == 0 { '?' } else { '&' });
        s.push_str(&path_segment(k));
        s.push('=');
        s.push_str(&path_segment(v));
    }
    s
}

fn quote_filename(path: &str) -> String {
    path.replace('\\', "\\\\").replace('"', "\\\"")
}

fn multipart_boundary(content_type: &str) -> Option<String> {
    let mut it = content_type.split(';');
    if !it
        .next()?
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    it.find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// One part of a multipart body.
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) name: Option<String>,
    pub(crate) filename: Option<String>,
    pub(crate) data: Bytes,
}

/// Parses a complete `multipart/form-data` body; a missing closing boundary is an error (the
/// official SDK raises "Truncated multipart response" in that case).
pub(crate) fn parse_multipart(body: &Bytes, boundary: &str) -> Result<Vec<Part>, String> {
    let delim = format!("--{boundary}");
    let find = |from: usize, pat: &[u8]| -> Option<usize> {
        body[from..]
            .windows(pat.len())
            .position(|w| w == pat)
            .map(|p| p + from)
    };
    let mut pos = find(0, delim.as_bytes()).ok_or("no multipart boundary in the body")?;
    let mut parts = Vec::new();
    loop {
        let after = pos + delim.len();
        if body[after..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[after..].starts_with(b"\r\n") {
            return Err("malformed multipart boundary line".into());
        }
        let head_start = after + 2;
        let head_end = find(head_start, b"\r\n\r\n").ok_or("truncated multipart headers")?;
        let headers = String::from_utf8_lossy(&body[head_start..head_end]).into_owned();
        let data_start = head_end + 4;
        let next_delim = format!("\r\n{delim}");
        let data_end = find(data_start, next_delim.as_bytes())
            .ok_or("truncated multipart response: closing boundary not received")?;
        let (mut name, mut filename, mut filename_star) = (None, None, None);
        for line in headers.split("\r\n") {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if !k.trim().eq_ignore_ascii_case("content-disposition") {
                continue;
            }
            for param in split_params(v) {
                let Some((pk, pv)) = param.split_once('=') else {
                    continue;
                };
                let pv = pv.trim();
                match pk.trim().to_ascii_lowercase().as_str() {
                    "name" => name = Some(unquote(pv)),
                    "filename" => filename = Some(unquote(pv)),
                    "filename*" => filename_star = decode_rfc5987(pv),
                    _ => {}
                }
            }
        }
        parts.push(Part {
            name,
            filename: filename_star.or(filename),
            data: body.slice(data_start..data_end),
        });
        pos = data_end + 2;
    }
}

fn split_params(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut escaped = false;
    for c in v.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' if quoted => {
                cur.push(c);
                escaped = true;
            }
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ';' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn unquote(v: &str) -> String {
    let Some(inner) = v.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
        return v.to_owned();
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn decode_rfc5987(v: &str) -> Option<String> {
    let mut it = v.splitn(3, '\'');
    let charset = it.next()?;
    let _lang = it.next()?;
    let enc = it.next()?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let bytes = enc.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bulk-download answer of the research notes (part B6), byte for byte.
    const FIXTURE: &[u8] = b"--DAYTONA-FILE-BOUNDARY\r\n\
Content-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"; filename*=utf-8''%2Ftmp%2Fa.txt\r\n\
Content-Length: 11\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
\r\n\
hello\r\nworld\r\n\
--DAYTONA-FILE-BOUNDARY\r\n\
Content-Disposition: form-data; name=\"error\"; filename=\"/tmp/missing\"; filename*=utf-8''%2Ftmp%2Fmissing\r\n\
Content-Type: application/json; charset=utf-8\r\n\
\r\n\
{\"statusCode\":404,\"message\":\"file not found: /tmp/missing\",\"code\":\"FILE_NOT_FOUND\",\"timestamp\":\"2024-01-01T00:00:00Z\",\"path\":\"/tmp/missing\",\"method\":\"POST\"}\r\n\
--DAYTONA-FILE-BOUNDARY--\r\n";

    #[test]
    fn parses_the_bulk_download_fixture() {
        assert_eq!(
            multipart_boundary("multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY").as_deref(),
            Some("DAYTONA-FILE-BOUNDARY")
        );
        let parts = parse_multipart(&Bytes::from_static(FIXTURE), "DAYTONA-FILE-BOUNDARY").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name.as_deref(), Some("file"));
        assert_eq!(parts[0].filename.as_deref(), Some("/tmp/a.txt"));
        assert_eq!(parts[0].data.as_ref(), b"hello\r\nworld");
        assert_eq!(parts[1].name.as_deref(), Some("error"));
        assert_eq!(parts[1].filename.as_deref(), Some("/tmp/missing"));
        let e = error::from_response(404, &HeaderMap::new(), &parts[1].data, "x", Stage::Before);
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.code(), Some("FILE_NOT_FOUND"));
    }

    #[test]
    fn a_truncated_multipart_body_is_an_error() {
        let cut = &FIXTURE[..FIXTURE.len() - 30];
        let err =
            parse_multipart(&Bytes::copy_from_slice(cut), "DAYTONA-FILE-BOUNDARY").unwrap_err();
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn filename_star_wins_and_handles_unicode_and_quotes() {
        let body = Bytes::from(
            "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/x?y \\\"q\\\"\"; filename*=utf-8''%2Ftmp%2Fx%C3%A9y%20%22q%22\r\n\r\nD\r\n--b--\r\n",
        );
        let parts = parse_multipart(&body, "b").unwrap();
        assert_eq!(parts[0].filename.as_deref(), Some("/tmp/xéy \"q\""));
        let body = Bytes::from(
            "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a;b \\\"c\\\"\"\r\n\r\nD\r\n--b--\r\n",
        );
        let parts = parse_multipart(&body, "b").unwrap();
        assert_eq!(parts[0].filename.as_deref(), Some("/tmp/a;b \"c\""));
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(path_segment("sbx-1_a.b"), "sbx-1_a.b");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
    }
}
