//! The two gRPC clients: the control plane ([`Control`], `modal.client.ModalClient`) and one
//! task's command router ([`Router`], `modal.task_command_router.TaskCommandRouter`), with the
//! metadata and token handling the 1.6.4 client uses.
//!
//! - Control-plane calls carry `x-modal-client-type`, `x-modal-client-version`, the token pair
//!   (`x-modal-token-id`, `x-modal-token-secret`) and an `x-idempotency-key` per logical call,
//!   kept across its retries (`modal/_utils/grpc_utils.py` `_retry_transient_errors`).
//! - V2 sandbox calls also carry `x-modal-auth-token`, the short-lived JWT from `AuthTokenGet`,
//!   fetched again when half of its lifetime has passed and always before its `exp`
//!   (`_utils/auth_token_manager.py`: refresh at 0.5–0.6 of the remaining lifetime).
//! - Router calls carry only `authorization: Bearer <router JWT>`. The JWT is fetched again
//!   (`SandboxGetCommandRouterAccess`, or `TaskGetCommandRouterAccess` for V1) when it is within
//!   30 s of its `exp`, before a call or after an `UNAUTHENTICATED` (the client's `_refresh_jwt`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use secrecy::{ExposeSecret, SecretString};
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::config::ModalConfig;
use crate::wire::api::{self, modal_client_client::ModalClientClient};
use crate::wire::tcr::{self, task_command_router_client::TaskCommandRouterClient};

/// The largest message accepted or sent.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// A router JWT this close to its `exp` is fetched again.
const JWT_MARGIN: Duration = Duration::from_secs(30);

/// A random UUID v4, as the client makes exec ids and idempotency keys (`uuid.uuid4()`).
pub fn uuid4() -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&execseam_adapter_kit::id::random_u64().to_le_bytes());
    b[8..].copy_from_slice(&execseam_adapter_kit::id::random_u64().to_le_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The `exp` claim of a JWT, read without verifying it (as the client does).
pub fn jwt_exp(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = v.get("exp")?;
    exp.as_u64().or_else(|| exp.as_f64().map(|f| f as u64))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn ascii(v: &str) -> Result<AsciiMetadataValue, Status> {
    v.parse()
        .map_err(|_| Status::invalid_argument("a metadata value is not printable ASCII"))
}

/// An HTTP/2 channel to `url`, connecting on first use.
pub fn channel(url: &str, config: &ModalConfig) -> Result<Channel, Status> {
    let mut ep = Endpoint::from_shared(url.to_owned())
        .map_err(|e| Status::invalid_argument(format!("bad URL {url:?}: {e}")))?
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if url.starts_with("https://") {
        ep = ep
            .tls_config(ClientTlsConfig::new().with_native_roots())
            .map_err(|e| Status::internal(format!("TLS setup: {e}")))?;
    }
    Ok(ep.connect_lazy())
}

struct AuthToken {
    token: SecretString,
    exp: u64,
    refresh_at: u64,
}

/// The control plane.
pub struct Control {
    config: Arc<ModalConfig>,
    channel: Channel,
    client: ModalClientClient<Channel>,
    auth: tokio::sync::Mutex<Option<AuthToken>>,
}

execseam_adapter_kit::debug_fields!(self => Control { url: self.config.server_url });

/// What a sandbox create needs.
pub struct Create {
    /// The app.
    pub app_id: String,
    /// The definition.
    pub definition: api::Sandbox,
    /// Sandbox-wide environment (sent as `secret_sources`, as the client sends `env=`).
    pub env: Vec<(String, String)>,
    /// Tags.
    pub tags: Vec<(String, String)>,
}

impl Control {
    /// A control-plane client; no I/O until the first call.
    pub fn new(config: Arc<ModalConfig>) -> Result<Control, Status> {
        let channel = channel(&config.server_url, &config)?;
        let client = ModalClientClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(Control {
            config,
            channel,
            client,
            auth: tokio::sync::Mutex::new(None),
        })
    }

    /// The channel, for a router that is served at the same URL.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<ModalConfig> {
        &self.config
    }

    fn metadata(&self, md: &mut MetadataMap, key: &str, attempt: u32) -> Result<(), Status> {
        let c = &self.config;
        md.insert("x-modal-client-type", ascii(&c.client_type.to_string())?);
        md.insert("x-modal-client-version", ascii(&c.client_version)?);
        md.insert(
            "x-modal-libmodal-version",
            ascii(concat!("execseam-modal/", env!("CARGO_PKG_VERSION")))?,
        );
        md.insert("x-modal-token-id", ascii(&c.token_id)?);
        md.insert(
            "x-modal-token-secret",
            ascii(c.token_secret.expose_secret())?,
        );
        md.insert("x-idempotency-key", ascii(key)?);
        md.insert("x-retry-attempt", ascii(&attempt.to_string())?);
        Ok(())
    }

    /// The current `AuthTokenGet` JWT, fetched again when due.
    pub async fn auth_token(&self) -> Result<SecretString, Status> {
        let mut slot = self.auth.lock().await;
        let t = now();
        if let Some(tok) = slot.as_ref()
            && t < tok.refresh_at
            && t < tok.exp
        {
            return Ok(tok.token.clone());
        }
        let mut req = Request::new(api::AuthTokenGetRequest {});
        self.metadata(req.metadata_mut(), &uuid4(), 0)?;
        req.set_timeout(self.config.request_timeout);
        let fetched = timed(
            self.config.request_timeout,
            self.client.clone().auth_token_get(req),
        )
        .await;
        let token = match fetched {
            Ok(r) => r.token,
            // A refresh that fails while the old token is still valid keeps the old one
            // (`_try_refresh_token`), except when the credentials were refused.
            Err(s) => match slot.as_ref() {
                Some(tok)
                    if t < tok.exp
                        && !matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied) =>
                {
                    return Ok(tok.token.clone());
                }
                _ => return Err(s),
            },
        };
        if token.is_empty() {
            return Err(Status::internal("AuthTokenGet returned no token"));
        }
        let exp = jwt_exp(&token).ok_or_else(|| {
            Status::internal("AuthTokenGet returned a token whose exp cannot be read")
        })?;
        let refresh_at = t + exp.saturating_sub(t) / 2;
        let token = SecretString::from(token);
        *slot = Some(AuthToken {
            token: token.clone(),
            exp,
            refresh_at,
        });
        Ok(token)
    }

    /// A request with the control-plane metadata (and the auth token for V2 calls).
    async fn request<T>(
        &self,
        msg: T,
        v2: bool,
        key: &str,
        attempt: u32,
    ) -> Result<Request<T>, Status> {
        let mut req = Request::new(msg);
        self.metadata(req.metadata_mut(), key, attempt)?;
        if v2 {
            let token = self.auth_token().await?;
            req.metadata_mut()
                .insert("x-modal-auth-token", ascii(token.expose_secret())?);
        }
        req.set_timeout(self.config.request_timeout);
        Ok(req)
    }

    async fn unary<M, R, F, Fut>(&self, msg: M, v2: bool, call: F) -> Result<R, Status>
    where
        M: Clone,
        F: Fn(ModalClientClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let key = uuid4();
        let req = self.request(msg, v2, &key, 0).await?;
        timed(self.config.request_timeout, call(self.client.clone(), req)).await
    }

    /// `AppGetOrCreate(CREATE_IF_MISSING)`.
    pub async fn app(&self) -> Result<String, Status> {
        let msg = api::AppGetOrCreateRequest {
            app_name: self.config.app_name.clone(),
            environment_name: self.config.environment.clone().unwrap_or_default(),
            object_creation_type: api::ObjectCreationType::CreateIfMissing as i32,
        };
        let r = self
            .create_with_retries(msg, false, |mut c, r| async move {
                c.app_get_or_create(r).await
            })
            .await?;
        Ok(r.app_id)
    }

    /// `ImageGetOrCreate` of `Image.from_registry(tag)`, then `ImageJoinStreaming` until the
    /// build has a final result.
    pub async fn image(&self, app_id: &str, image: &str) -> Result<String, Status> {
        if image.starts_with("im-") {
            return Ok(image.to_owned());
        }
        let msg = api::ImageGetOrCreateRequest {
            image: Some(api::Image {
                dockerfile_commands: vec![format!("FROM {image}")],
                ..Default::default()
            }),
            app_id: app_id.to_owned(),
            builder_version: self.config.image_builder_version.clone(),
            ..Default::default()
        };
        let r = self
            .create_with_retries(msg, false, |mut c, r| async move {
                c.image_get_or_create(r).await
            })
            .await?;
        let mut result = r.result.unwrap_or_default();
        let mut last = String::new();
        while result.status == api::generic_result::GenericStatus::Unspecified as i32 {
            let join = api::ImageJoinStreamingRequest {
                image_id: r.image_id.clone(),
                timeout: 55.0,
                last_entry_id: last.clone(),
                include_logs_for_finished: false,
            };
            let req = self.request(join, false, &uuid4(), 0).await?;
            let mut stream = self
                .client
                .clone()
                .image_join_streaming(req)
                .await?
                .into_inner();
            while let Some(m) = stream.message().await? {
                if !m.entry_id.is_empty() {
                    last = m.entry_id.clone();
                }
                if let Some(res) = m.result
                    && res.status != 0
                {
                    result = res;
                    break;
                }
            }
        }
        if result.status != api::generic_result::GenericStatus::Success as i32 {
            return Err(Status::failed_precondition(format!(
                "the image build ended with status {}: {}",
                result.status, result.exception
            )));
        }
        Ok(r.image_id)
    }

    /// Repeats a creating call with the same idempotency key on transient failures (the key is
    /// what lets Modal deduplicate; the client does the same), honouring Modal's retry policy.
    async fn create_with_retries<M, R, F, Fut>(
        &self,
        msg: M,
        v2: bool,
        call: F,
    ) -> Result<R, Status>
    where
        M: Clone,
        F: Fn(ModalClientClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        const ATTEMPTS: u32 = 4;
        let key = uuid4();
        let mut delay = Duration::from_millis(100);
        for attempt in 0.. {
            let req = self.request(msg.clone(), v2, &key, attempt).await?;
            match timed(self.config.request_timeout, call(self.client.clone(), req)).await {
                Ok(r) => return Ok(r),
                Err(s) if attempt + 1 < ATTEMPTS && crate::error::transient(&s) => {
                    // Beyond the cap: fail now, the delay in the error (never waited in full).
                    let Some(wait) = execseam_adapter_kit::retry::own_retry_wait(
                        crate::error::requested_delay(&s),
                        delay,
                    ) else {
                        return Err(s);
                    };
                    tracing::debug!(provider = "modal", code = ?s.code(), attempt, "create call failed; retrying with the same idempotency key");
                    tokio::time::sleep(wait).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(s) => return Err(s),
            }
        }
        unreachable!("the loop returns")
    }

    /// `SandboxCreateV2`: the sandbox id, its task id and the first router access.
    pub async fn create_sandbox(
        &self,
        create: Create,
    ) -> Result<api::SandboxCreateV2Response, Status> {
        let env = api::StringMap {
            contents: create.env.into_iter().collect(),
        };
        let msg = api::SandboxCreateV2Request {
            app_id: create.app_id,
            definition: Some(create.definition),
            secret_sources: if env.contents.is_empty() {
                Vec::new()
            } else {
                vec![api::SecretSource {
                    source: Some(api::secret_source::Source::Env(env)),
                }]
            },
            tags: create
                .tags
                .into_iter()
                .map(|(tag_name, tag_value)| api::SandboxTag {
                    tag_name,
                    tag_value,
                })
                .collect(),
            ..Default::default()
        };
        self.create_with_retries(
            msg,
            true,
            |mut c, r| async move { c.sandbox_create_v2(r).await },
        )
        .await
    }

    /// `SandboxWait{timeout}` (V2 or V1): the result, unset while running.
    pub async fn wait(
        &self,
        sandbox_id: &str,
        v2: bool,
        timeout: f32,
    ) -> Result<Option<api::GenericResult>, Status> {
        let msg = api::SandboxWaitRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout,
        };
        let r = if v2 {
            self.unary(
                msg,
                true,
                |mut c, r| async move { c.sandbox_wait_v2(r).await },
            )
            .await?
        } else {
            self.unary(
                msg,
                false,
                |mut c, r| async move { c.sandbox_wait(r).await },
            )
            .await?
        };
        Ok(r.result.filter(|res| res.status != 0))
    }

    /// `SandboxGetTaskId` (V2 or V1): the task id, or the result of a finished sandbox.
    pub async fn task_id(&self, sandbox_id: &str, v2: bool) -> Result<String, Status> {
        let msg = api::SandboxGetTaskIdRequest {
            sandbox_id: sandbox_id.to_owned(),
            ..Default::default()
        };
        let r = if v2 {
            self.unary(msg, true, |mut c, r| async move {
                c.sandbox_get_task_id_v2(r).await
            })
            .await?
        } else {
            self.unary(msg, false, |mut c, r| async move {
                c.sandbox_get_task_id(r).await
            })
            .await?
        };
        match (r.task_id, r.task_result) {
            (Some(t), _) if !t.is_empty() => Ok(t),
            (_, Some(res)) => Err(Status::failed_precondition(if res.exception.is_empty() {
                format!("sandbox {sandbox_id} already finished")
            } else {
                res.exception
            })),
            _ => Err(Status::unavailable(format!(
                "sandbox {sandbox_id} is not scheduled yet"
            ))),
        }
    }

    /// Router access for a V2 sandbox (`SandboxGetCommandRouterAccess`) or a V1 task
    /// (`TaskGetCommandRouterAccess`).
    pub async fn access(&self, target: &AccessTarget) -> Result<api::CommandRouterAccess, Status> {
        match target {
            AccessTarget::Sandbox(id) => {
                use api::sandbox_get_command_router_access_request::Target;
                let msg = api::SandboxGetCommandRouterAccessRequest {
                    target: Some(Target::SandboxId(id.clone())),
                };
                let r = self
                    .unary(msg, true, |mut c, r| async move {
                        c.sandbox_get_command_router_access(r).await
                    })
                    .await?;
                Ok(api::CommandRouterAccess {
                    jwt: r.jwt,
                    url: r.url,
                })
            }
            AccessTarget::Task(task_id) => {
                let msg = api::TaskGetCommandRouterAccessRequest {
                    task_id: task_id.clone(),
                };
                let r = self
                    .unary(msg, false, |mut c, r| async move {
                        c.task_get_command_router_access(r).await
                    })
                    .await?;
                Ok(api::CommandRouterAccess {
                    jwt: r.jwt,
                    url: r.url,
                })
            }
        }
    }

    /// `ImageDelete` (`modal.experimental.image_delete`: the token only, no auth token).
    pub async fn image_delete(&self, image_id: &str) -> Result<(), Status> {
        let msg = api::ImageDeleteRequest {
            image_id: image_id.to_owned(),
        };
        self.unary(
            msg,
            false,
            |mut c, r| async move { c.image_delete(r).await },
        )
        .await
        .map(drop)
    }

    /// `SandboxGetTunnels` (V2 or V1): the sandbox's tunnels, the service waiting for them at
    /// most `wait`; not ready by then is `UNAVAILABLE` (the client's `SandboxTimeoutError`).
    pub async fn tunnels(
        &self,
        sandbox_id: &str,
        v2: bool,
        wait: Duration,
    ) -> Result<Vec<api::TunnelData>, Status> {
        let msg = api::SandboxGetTunnelsRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: wait.as_secs_f32(),
        };
        let r = if v2 {
            self.unary(msg, true, |mut c, r| async move {
                c.sandbox_get_tunnels_v2(r).await
            })
            .await?
        } else {
            self.unary(msg, false, |mut c, r| async move {
                c.sandbox_get_tunnels(r).await
            })
            .await?
        };
        let timed_out = api::generic_result::GenericStatus::Timeout as i32;
        if r.result.is_some_and(|res| res.status == timed_out) {
            return Err(Status::unavailable(format!(
                "the tunnels of sandbox {sandbox_id} were not ready within {wait:?}"
            )));
        }
        Ok(r.tunnels)
    }

    /// `SandboxTerminate` (V2 or V1).
    pub async fn terminate(&self, sandbox_id: &str, v2: bool) -> Result<(), Status> {
        let msg = api::SandboxTerminateRequest {
            sandbox_id: sandbox_id.to_owned(),
        };
        if v2 {
            self.unary(msg, true, |mut c, r| async move {
                c.sandbox_terminate_v2(r).await
            })
            .await?;
        } else {
            self.unary(msg, false, |mut c, r| async move {
                c.sandbox_terminate(r).await
            })
            .await?;
        }
        Ok(())
    }

    /// One page of `SandboxListV2` (both V1 and V2 sandboxes, newest first).
    pub async fn list_page(
        &self,
        before: f64,
        tags: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<api::SandboxInfo>, Status> {
        let msg = api::SandboxListRequest {
            app_id: String::new(),
            before_timestamp: before,
            environment_name: self.config.environment.clone().unwrap_or_default(),
            include_finished: false,
            tags: tags
                .iter()
                .map(|(k, v)| api::SandboxTag {
                    tag_name: k.clone(),
                    tag_value: v.clone(),
                })
                .collect(),
        };
        let r = self
            .unary(
                msg,
                true,
                |mut c, r| async move { c.sandbox_list_v2(r).await },
            )
            .await?;
        Ok(r.sandboxes)
    }
}

/// Whose router access to fetch.
#[derive(Clone, Debug)]
pub enum AccessTarget {
    /// A V2 sandbox, by id.
    Sandbox(String),
    /// A V1 task, by id.
    Task(String),
}

async fn timed<R>(
    limit: Duration,
    fut: impl Future<Output = Result<tonic::Response<R>, Status>>,
) -> Result<R, Status> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "{} {limit:?}",
            crate::error::TIMER_MESSAGE
        ))),
    }
}

struct Jwt {
    token: SecretString,
    exp: Option<u64>,
}

/// One task's command router.
pub struct Router {
    control: Arc<Control>,
    target: AccessTarget,
    url: String,
    client: TaskCommandRouterClient<Channel>,
    jwt: Mutex<Jwt>,
    refresh: tokio::sync::Mutex<()>,
}

execseam_adapter_kit::debug_fields!(self => Router { url: self.url, target: self.target });

impl Router {
    /// A router client for `access` (its URL must be https, or http with a loopback control
    /// plane, as the client requires).
    pub fn new(
        control: Arc<Control>,
        target: AccessTarget,
        access: api::CommandRouterAccess,
    ) -> Result<Router, Status> {
        let url = access.url.trim_end_matches('/').to_owned();
        if !(url.starts_with("https://")
            || (url.starts_with("http://") && control.config().is_localhost()))
        {
            return Err(Status::failed_precondition(format!(
                "task router URL must be https, got: {url}"
            )));
        }
        let channel = if url == control.config().server_url {
            control.channel().clone()
        } else {
            channel(&url, control.config())?
        };
        let client = TaskCommandRouterClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let exp = jwt_exp(&access.jwt);
        Ok(Router {
            control,
            target,
            url,
            client,
            jwt: Mutex::new(Jwt {
                token: SecretString::from(access.jwt),
                exp,
            }),
            refresh: tokio::sync::Mutex::new(()),
        })
    }

    /// The router's client (cheap to clone).
    pub fn client(&self) -> TaskCommandRouterClient<Channel> {
        self.client.clone()
    }

    fn near_expiry(&self) -> bool {
        let jwt = self.jwt.lock().expect("jwt");
        jwt.exp
            .is_some_and(|exp| exp <= now() + JWT_MARGIN.as_secs())
    }

    /// Fetches a fresh JWT if the current one is within 30 s of expiry. True if it did.
    pub async fn refresh_if_due(&self) -> Result<bool, Status> {
        if !self.near_expiry() {
            return Ok(false);
        }
        let _one = self.refresh.lock().await;
        if !self.near_expiry() {
            return Ok(true); // another caller refreshed it
        }
        let access = self.control.access(&self.target).await?;
        if access.url.trim_end_matches('/') != self.url {
            tracing::warn!(
                provider = "modal",
                "the task router URL changed; keeping the first"
            );
        }
        let exp = jwt_exp(&access.jwt);
        *self.jwt.lock().expect("jwt") = Jwt {
            token: SecretString::from(access.jwt),
            exp,
        };
        Ok(true)
    }

    /// A request with the bearer JWT.
    pub fn request<T>(&self, msg: T) -> Result<Request<T>, Status> {
        let mut req = Request::new(msg);
        let bearer = format!(
            "Bearer {}",
            self.jwt.lock().expect("jwt").token.expose_secret()
        );
        req.metadata_mut().insert("authorization", ascii(&bearer)?);
        req.metadata_mut().insert(
            "x-throttle-retry-attempt",
            AsciiMetadataValue::from_static("0"),
        );
        Ok(req)
    }

    /// Runs a unary router call: refreshes a JWT that is due, and once more after an
    /// `UNAUTHENTICATED` if the JWT was due (otherwise the rejection stands).
    pub async fn call<M, R, F, Fut>(
        &self,
        msg: M,
        deadline: Option<Duration>,
        f: F,
    ) -> Result<R, Status>
    where
        M: Clone,
        F: Fn(TaskCommandRouterClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        self.refresh_if_due().await?;
        let run = |msg: M| async {
            let req = self.request(msg)?;
            match deadline {
                Some(d) => timed(d, f(self.client(), req)).await,
                None => f(self.client(), req).await.map(tonic::Response::into_inner),
            }
        };
        match run(msg.clone()).await {
            Err(s) if s.code() == Code::Unauthenticated && self.refresh_if_due().await? => {
                run(msg).await
            }
            r => r,
        }
    }

    /// `TaskExecStart`.
    pub async fn exec_start(&self, req: tcr::TaskExecStartRequest) -> Result<(), Status> {
        let d = self.control.config().request_timeout;
        self.call(req, Some(d), |mut c, r| async move {
            c.task_exec_start(r).await
        })
        .await
        .map(drop)
    }

    /// `TaskSnapshotFilesystem` within `deadline` (the client's `snapshot_filesystem(timeout=55)`).
    pub async fn snapshot_filesystem(
        &self,
        req: tcr::TaskSnapshotFilesystemRequest,
        deadline: Duration,
    ) -> Result<String, Status> {
        self.call(req, Some(deadline), |mut c, r| async move {
            c.task_snapshot_filesystem(r).await
        })
        .await
        .map(|r| r.image_id)
    }

    /// `TaskExecStdinWrite`.
    pub async fn stdin_write(&self, req: tcr::TaskExecStdinWriteRequest) -> Result<(), Status> {
        let d = self.control.config().request_timeout;
        self.call(req, Some(d), |mut c, r| async move {
            c.task_exec_stdin_write(r).await
        })
        .await
        .map(drop)
    }

    /// `TaskExecStdinStatus`: the bytes accepted and whether stdin is closed (it evicts any
    /// stdin stream in flight, as the proto documents; this adapter writes unary only).
    pub async fn stdin_status(
        &self,
        task_id: &str,
        exec_id: &str,
    ) -> Result<tcr::TaskExecStdinStatusResponse, Status> {
        let msg = tcr::TaskExecStdinStatusRequest {
            task_id: task_id.to_owned(),
            exec_id: exec_id.to_owned(),
        };
        let d = self.control.config().request_timeout;
        self.call(msg, Some(d), |mut c, r| async move {
            c.task_exec_stdin_status(r).await
        })
        .await
    }

    /// `TaskExecPoll`: the exit status if the command has exited (bounded by the request
    /// timeout).
    pub async fn poll(
        &self,
        task_id: &str,
        exec_id: &str,
    ) -> Result<tcr::TaskExecPollResponse, Status> {
        let msg = tcr::TaskExecPollRequest {
            task_id: task_id.to_owned(),
            exec_id: exec_id.to_owned(),
        };
        let d = self.control.config().request_timeout;
        self.call(
            msg,
            Some(d),
            |mut c, r| async move { c.task_exec_poll(r).await },
        )
        .await
    }

    /// `TaskExecStdioRead` opened (bounded by the request timeout up to its headers; the
    /// stream itself is not).
    pub async fn stdio_read(
        &self,
        msg: tcr::TaskExecStdioReadRequest,
    ) -> Result<tonic::Streaming<tcr::TaskExecStdioReadResponse>, Status> {
        let d = self.control.config().request_timeout;
        let req = self.request(msg)?;
        timed(d, self.client().task_exec_stdio_read(req)).await
    }

    /// `TaskExecWait`: blocks until the command exits.
    pub async fn wait(
        &self,
        task_id: &str,
        exec_id: &str,
    ) -> Result<tcr::TaskExecWaitResponse, Status> {
        let msg = tcr::TaskExecWaitRequest {
            task_id: task_id.to_owned(),
            exec_id: exec_id.to_owned(),
        };
        self.call(
            msg,
            None,
            |mut c, r| async move { c.task_exec_wait(r).await },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_v4_shaped_and_distinct() {
        let a = uuid4();
        let b = uuid4();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn the_exp_of_a_jwt_is_read_without_verifying() {
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"x","exp":1700000000}"#);
        assert_eq!(jwt_exp(&format!("h.{payload}.sig")), Some(1_700_000_000));
        let float = URL_SAFE_NO_PAD.encode(br#"{"exp":12.5}"#);
        assert_eq!(jwt_exp(&format!("h.{float}.s")), Some(12));
        assert_eq!(jwt_exp("not-a-jwt"), None);
        let none = URL_SAFE_NO_PAD.encode(br#"{"sub":"x"}"#);
        assert_eq!(jwt_exp(&format!("h.{none}.s")), None);
    }
}
