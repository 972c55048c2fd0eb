//! `modal.client.ModalClient`: the control-plane RPCs the 1.6.4 client makes for sandboxes.
//!
//! Credentials: every call carries `x-modal-token-id`/`x-modal-token-secret` (the client sends
//! them on every control-plane call, `modal/client.py` `_get_metadata`); the V2 sandbox RPCs also
//! carry `x-modal-auth-token`, a token from `AuthTokenGet` (`sandbox/_impl_v2.py`
//! `auth_metadata`). Missing or unknown ones are `UNAUTHENTICATED` (the client's `AuthError`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use execseam_modal_proto::api::{
    self, generic_result::GenericStatus, modal_client_server::ModalClient,
};
use execseam_modal_proto::google::protobuf::Empty;
use futures_core::Stream;
use tonic::{Request, Response, Status};

use super::{Shared, ids, now_secs, secret_env};
use execseam_emulator_kit::grpc::BodyFault;
use execseam_emulator_kit::{ConnControl, Fault, reset_connection};

pub(crate) struct Control {
    pub(crate) shared: Arc<Shared>,
}

/// A boxed response stream.
pub(crate) type BoxStream<T> = std::pin::Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn header<'a, T>(r: &'a Request<T>, key: &str) -> Option<&'a str> {
    r.metadata().get(key).and_then(|v| v.to_str().ok())
}

impl Control {
    fn credentials<T>(&self, r: &Request<T>) -> Result<(), Status> {
        let id = header(r, "x-modal-token-id").unwrap_or_default();
        let secret = header(r, "x-modal-token-secret").unwrap_or_default();
        let ok = !id.is_empty() && !secret.is_empty() && self.shared.shell.token().accepts(secret);
        if ok {
            Ok(())
        } else {
            Err(Status::unauthenticated("Token missing or invalid"))
        }
    }

    fn auth_token<T>(&self, r: &Request<T>) -> Result<(), Status> {
        self.credentials(r)?;
        let token = header(r, "x-modal-auth-token").unwrap_or_default();
        match self.shared.lock().auth_tokens.get(token) {
            Some(&exp) if exp > now_secs() => Ok(()),
            Some(_) => Err(Status::unauthenticated("auth token expired")),
            None => Err(Status::unauthenticated("missing or invalid auth token")),
        }
    }

    /// See [`Shared::fault`]; the rest is rendered by [`Control::answer`].
    async fn fault(&self, route: &str) -> Result<Option<Fault>, Status> {
        self.shared.fault(route).await
    }

    /// Answers `body` after the request took effect, rendering a remaining fault.
    async fn answer<T>(
        &self,
        fault: Option<Fault>,
        ctl: Option<ConnControl>,
        body: T,
    ) -> Result<Response<T>, Status> {
        let mut response = Response::new(body);
        match fault {
            Some(Fault::ServerError) => {
                return Err(Status::internal("emulated fault: internal error"));
            }
            Some(Fault::ResetBeforeResponse) => return reset_connection(ctl.as_ref()).await,
            Some(Fault::CutBeforeExit) => {
                response.extensions_mut().insert(BodyFault::StripTrailers);
            }
            Some(Fault::MalformedBody) => {
                response.extensions_mut().insert(BodyFault::Malformed);
            }
            _ => {}
        }
        Ok(response)
    }

    async fn create(
        &self,
        v2: bool,
        r: Request<CreateArgs>,
    ) -> Result<(String, String, Option<Fault>), Status> {
        let fault = self.fault("create").await?;
        if v2 {
            self.auth_token(&r)?;
        } else {
            self.credentials(&r)?;
        }
        let key = header(&r, "x-idempotency-key").map(str::to_owned);
        let args = r.into_inner();
        let def = args.definition.unwrap_or_default();
        if def.pty_info.is_some() || !def.nfs_mounts.is_empty() {
            return Err(Status::unimplemented(
                "PTY and network file system sandboxes are not emulated",
            ));
        }
        if !def.secret_ids.is_empty() || !def.mount_ids.is_empty() || !def.volume_mounts.is_empty()
        {
            return Err(Status::not_found(
                "Secrets, mounts and volumes are not emulated",
            ));
        }
        let env = secret_env(&args.secret_sources)?;
        // The client sends one idempotency key for all attempts of a create (grpc_utils.py
        // `_retry_transient_errors`): a retry after a lost answer gets the first sandbox.
        let cell = key.map(|k| {
            self.shared
                .lock()
                .created
                .entry(format!("{v2}/{k}"))
                .or_default()
                .clone()
        });
        let make = || async {
            self.shared
                .new_sandbox(v2, &args.app_id, &def, env.clone(), args.tags.clone())
                .await
                .map(|sb| sb.id.clone())
        };
        let id = match &cell {
            Some(cell) => cell.get_or_try_init(make).await?.clone(),
            None => make().await?,
        };
        let sb = self.shared.sandbox(&id)?;
        if fault == Some(Fault::SandboxVanishes) {
            self.shared.vanish(&sb);
        }
        Ok((id, sb.task_id.clone(), fault))
    }
}

/// What both create RPCs carry.
struct CreateArgs {
    app_id: String,
    definition: Option<api::Sandbox>,
    tags: Vec<api::SandboxTag>,
    secret_sources: Vec<api::SecretSource>,
}

fn metadata(sb: &super::ModalSandbox) -> api::SandboxHandleMetadata {
    api::SandboxHandleMetadata {
        result: sb.result(),
        app_id: sb.app_id.clone(),
    }
}

fn running_result(sb: &super::ModalSandbox) -> Option<api::GenericResult> {
    // An empty result (status 0) means "still running" to the client.
    Some(sb.result().unwrap_or_default())
}

#[tonic::async_trait]
impl ModalClient for Control {
    async fn app_get_or_create(
        &self,
        r: Request<api::AppGetOrCreateRequest>,
    ) -> Result<Response<api::AppGetOrCreateResponse>, Status> {
        let fault = self.fault("app").await?;
        self.credentials(&r)?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let req = r.into_inner();
        use api::ObjectCreationType as T;
        let kind = T::try_from(req.object_creation_type).unwrap_or(T::Unspecified);
        let env = if req.environment_name.is_empty() {
            "main".to_owned()
        } else {
            req.environment_name.clone()
        };
        let app_id = {
            let mut st = self.shared.lock();
            let key = (env, req.app_name.clone());
            match (kind, st.apps.get(&key).cloned()) {
                (T::Ephemeral | T::AnonymousOwnedByApp, _) => {
                    let id = ids::v1("ap");
                    st.apps.insert((key.0, id.clone()), id.clone());
                    id
                }
                (T::CreateFailIfExists, Some(_)) => {
                    return Err(Status::already_exists(format!(
                        "App {:?} already exists",
                        req.app_name
                    )));
                }
                (T::CreateOverwriteIfExists, _) | (_, None) if kind != T::Unspecified => {
                    let id = ids::v1("ap");
                    st.apps.insert(key, id.clone());
                    id
                }
                (_, Some(id)) => id,
                (_, None) => {
                    return Err(Status::not_found(format!(
                        "Could not find app {:?}",
                        req.app_name
                    )));
                }
            }
        };
        let body = api::AppGetOrCreateResponse {
            app_id,
            handle_metadata: None,
        };
        self.answer(fault, ctl, body).await
    }

    async fn auth_token_get(
        &self,
        r: Request<api::AuthTokenGetRequest>,
    ) -> Result<Response<api::AuthTokenGetResponse>, Status> {
        let fault = self.fault("auth-token").await?;
        self.credentials(&r)?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let token = self.shared.issue_auth_token();
        self.answer(fault, ctl, api::AuthTokenGetResponse { token })
            .await
    }

    async fn client_hello(
        &self,
        r: Request<Empty>,
    ) -> Result<Response<api::ClientHelloResponse>, Status> {
        self.credentials(&r)?;
        Ok(Response::new(api::ClientHelloResponse {
            image_builder_version: "2025.06".into(),
            ..Default::default()
        }))
    }

    async fn environment_get_or_create(
        &self,
        r: Request<api::EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<api::EnvironmentGetOrCreateResponse>, Status> {
        self.credentials(&r)?;
        let name = match r.into_inner().deployment_name {
            n if n.is_empty() => "main".to_owned(),
            n => n,
        };
        Ok(Response::new(api::EnvironmentGetOrCreateResponse {
            environment_id: ids::v1_for("en", name.as_bytes()),
            metadata: Some(api::EnvironmentMetadata {
                name,
                settings: Some(api::EnvironmentSettings {
                    image_builder_version: "2025.06".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }))
    }

    async fn image_get_or_create(
        &self,
        r: Request<api::ImageGetOrCreateRequest>,
    ) -> Result<Response<api::ImageGetOrCreateResponse>, Status> {
        let fault = self.fault("image").await?;
        self.credentials(&r)?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let req = r.into_inner();
        use prost::Message as _;
        let (image_id, def) = if req.existing_image_id.is_empty() {
            let def = req.image.unwrap_or_default();
            (ids::v1_for("im", &def.encode_to_vec()), Some(def))
        } else {
            (req.existing_image_id, None)
        };
        if let Some(def) = def {
            self.shared.lock().images.insert(image_id.clone(), def);
        }
        // The build: only `ENV` and `WORKDIR` mean anything here, and a line the builder
        // cannot parse fails it (`_image.py` raises `ImageBuildError` with the exception).
        let result = match self.shared.image_config(&image_id) {
            Ok(_) => api::GenericResult {
                status: GenericStatus::Success as i32,
                ..Default::default()
            },
            Err(e) => api::GenericResult {
                status: GenericStatus::Failure as i32,
                exception: e.to_string(),
                ..Default::default()
            },
        };
        let body = api::ImageGetOrCreateResponse {
            image_id,
            result: Some(result),
            metadata: None,
        };
        self.answer(fault, ctl, body).await
    }

    /// `modal.experimental.image_delete(image_id)`.
    async fn image_delete(
        &self,
        r: Request<api::ImageDeleteRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.credentials(&r)?;
        self.shared.delete_image(&r.get_ref().image_id)?;
        Ok(Response::new(Empty {}))
    }

    type ImageJoinStreamingStream = BoxStream<api::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        r: Request<api::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        self.credentials(&r)?;
        let done = api::ImageJoinStreamingResponse {
            result: Some(api::GenericResult {
                status: GenericStatus::Success as i32,
                ..Default::default()
            }),
            eof: true,
            ..Default::default()
        };
        let s: Self::ImageJoinStreamingStream = Box::pin(futures_util_once(Ok(done)));
        Ok(Response::new(s))
    }

    async fn sandbox_create(
        &self,
        r: Request<api::SandboxCreateRequest>,
    ) -> Result<Response<api::SandboxCreateResponse>, Status> {
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let r = map_request(r, |q| CreateArgs {
            app_id: q.app_id,
            definition: q.definition,
            tags: q.tags,
            secret_sources: Vec::new(),
        });
        let (id, _, fault) = self.create(false, r).await?;
        let sb = self.shared.sandbox(&id)?;
        let body = api::SandboxCreateResponse {
            sandbox_id: id,
            metadata: Some(metadata(&sb)),
        };
        self.answer(fault, ctl, body).await
    }

    async fn sandbox_create_v2(
        &self,
        r: Request<api::SandboxCreateV2Request>,
    ) -> Result<Response<api::SandboxCreateV2Response>, Status> {
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let r = map_request(r, |q| {
            let mut sources = q.secret_sources;
            if let Some(m) = q.ephemeral_secrets {
                sources.push(api::SecretSource {
                    source: Some(api::secret_source::Source::Env(m)),
                });
            }
            CreateArgs {
                app_id: q.app_id,
                definition: q.definition,
                tags: q.tags,
                secret_sources: sources,
            }
        });
        let forwarded = forwarded_host(r.metadata());
        let (id, task_id, fault) = self.create(true, r).await?;
        let sb = self.shared.sandbox(&id)?;
        let body = api::SandboxCreateV2Response {
            sandbox_id: id,
            // The encrypted ones only: an unencrypted endpoint is "not known at create time"
            // (modal 1.6.4 `sandbox/_impl_v2.py`), so the client asks `SandboxGetTunnelsV2`.
            tunnels: sb
                .tunnels
                .iter()
                .filter(|t| t.encrypted_only())
                .map(|t| t.data(false))
                .collect(),
            command_router_access: Some(self.shared.access(&task_id, forwarded.as_deref())),
            task_id,
            metadata: Some(metadata(&sb)),
            sandbox_token: String::new(),
        };
        self.answer(fault, ctl, body).await
    }

    async fn sandbox_get_command_router_access(
        &self,
        r: Request<api::SandboxGetCommandRouterAccessRequest>,
    ) -> Result<Response<api::SandboxGetCommandRouterAccessResponse>, Status> {
        let fault = self.fault("access").await?;
        self.auth_token(&r)?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let forwarded = forwarded_host(r.metadata());
        use api::sandbox_get_command_router_access_request::Target;
        let sb = match r.into_inner().target {
            Some(Target::SandboxId(id)) => self.shared.sandbox(&id)?,
            Some(Target::TaskId(t)) => self
                .shared
                .lock()
                .tasks
                .get(&t)
                .cloned()
                .ok_or_else(|| Status::not_found(format!("Task {t} not found")))?,
            None => {
                return Err(Status::invalid_argument(
                    "sandbox_id or task_id is required",
                ));
            }
        };
        if !sb.is_running() {
            return Err(Status::failed_precondition(format!(
                "Sandbox {} has already finished",
                sb.id
            )));
        }
        let access = self.shared.access(&sb.task_id, forwarded.as_deref());
        let body = api::SandboxGetCommandRouterAccessResponse {
            jwt: access.jwt,
            url: access.url,
            worker_ipv4_address: "127.0.0.1".into(),
        };
        self.answer(fault, ctl, body).await
    }

    async fn sandbox_get_from_name(
        &self,
        r: Request<api::SandboxGetFromNameRequest>,
    ) -> Result<Response<api::SandboxGetFromNameResponse>, Status> {
        self.credentials(&r)?;
        self.by_name(r.into_inner()).map(Response::new)
    }

    async fn sandbox_get_from_name_v2(
        &self,
        r: Request<api::SandboxGetFromNameRequest>,
    ) -> Result<Response<api::SandboxGetFromNameResponse>, Status> {
        self.fault("lookup").await?;
        self.auth_token(&r)?;
        self.by_name(r.into_inner()).map(Response::new)
    }

    async fn sandbox_get_task_id(
        &self,
        r: Request<api::SandboxGetTaskIdRequest>,
    ) -> Result<Response<api::SandboxGetTaskIdResponse>, Status> {
        self.credentials(&r)?;
        self.task_id(r.into_inner()).map(Response::new)
    }

    async fn sandbox_get_task_id_v2(
        &self,
        r: Request<api::SandboxGetTaskIdRequest>,
    ) -> Result<Response<api::SandboxGetTaskIdResponse>, Status> {
        self.fault("lookup").await?;
        self.auth_token(&r)?;
        self.task_id(r.into_inner()).map(Response::new)
    }

    async fn sandbox_get_tunnels(
        &self,
        r: Request<api::SandboxGetTunnelsRequest>,
    ) -> Result<Response<api::SandboxGetTunnelsResponse>, Status> {
        self.credentials(&r)?;
        self.tunnels(r.into_inner()).map(Response::new)
    }

    async fn sandbox_get_tunnels_v2(
        &self,
        r: Request<api::SandboxGetTunnelsRequest>,
    ) -> Result<Response<api::SandboxGetTunnelsResponse>, Status> {
        self.fault("lookup").await?;
        self.auth_token(&r)?;
        self.tunnels(r.into_inner()).map(Response::new)
    }

    async fn sandbox_list(
        &self,
        r: Request<api::SandboxListRequest>,
    ) -> Result<Response<api::SandboxListResponse>, Status> {
        self.credentials(&r)?;
        Ok(Response::new(self.list(r.into_inner())))
    }

    async fn sandbox_list_v2(
        &self,
        r: Request<api::SandboxListRequest>,
    ) -> Result<Response<api::SandboxListResponse>, Status> {
        self.fault("lookup").await?;
        self.auth_token(&r)?;
        Ok(Response::new(self.list(r.into_inner())))
    }

    async fn sandbox_tags_get(
        &self,
        r: Request<api::SandboxTagsGetRequest>,
    ) -> Result<Response<api::SandboxTagsGetResponse>, Status> {
        self.credentials(&r)?;
        let sb = self.shared.sandbox(&r.into_inner().sandbox_id)?;
        Ok(Response::new(api::SandboxTagsGetResponse {
            tags: sb.tags(),
        }))
    }

    async fn sandbox_tags_get_v2(
        &self,
        r: Request<api::SandboxTagsGetRequest>,
    ) -> Result<Response<api::SandboxTagsGetResponse>, Status> {
        self.auth_token(&r)?;
        let sb = self.shared.sandbox(&r.into_inner().sandbox_id)?;
        Ok(Response::new(api::SandboxTagsGetResponse {
            tags: sb.tags(),
        }))
    }

    async fn sandbox_tags_set(
        &self,
        r: Request<api::SandboxTagsSetRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.credentials(&r)?;
        self.set_tags(r.into_inner())
    }

    async fn sandbox_tags_set_v2(
        &self,
        r: Request<api::SandboxTagsSetRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.auth_token(&r)?;
        self.set_tags(r.into_inner())
    }

    async fn sandbox_terminate(
        &self,
        r: Request<api::SandboxTerminateRequest>,
    ) -> Result<Response<api::SandboxTerminateResponse>, Status> {
        let fault = self.fault("terminate").await?;
        self.credentials(&r)?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let body = self.terminate(&r.into_inner().sandbox_id)?;
        self.answer(fault, ctl, body).await
    }

    async fn sandbox_terminate_v2(
        &self,
        r: Request<api::SandboxTerminateRequest>,
    ) -> Result<Response<api::SandboxTerminateResponse>, Status> {
        let fault = self.fault("terminate").await?;
        self.auth_token(&r)?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let body = self.terminate(&r.into_inner().sandbox_id)?;
        self.answer(fault, ctl, body).await
    }

    async fn sandbox_wait(
        &self,
        r: Request<api::SandboxWaitRequest>,
    ) -> Result<Response<api::SandboxWaitResponse>, Status> {
        self.credentials(&r)?;
        self.wait(r.into_inner()).await.map(Response::new)
    }

    async fn sandbox_wait_v2(
        &self,
        r: Request<api::SandboxWaitRequest>,
    ) -> Result<Response<api::SandboxWaitResponse>, Status> {
        self.fault("lookup").await?;
        self.auth_token(&r)?;
        self.wait(r.into_inner()).await.map(Response::new)
    }

    async fn task_get_command_router_access(
        &self,
        r: Request<api::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<api::TaskGetCommandRouterAccessResponse>, Status> {
        self.fault("access").await?;
        self.credentials(&r)?;
        let forwarded = forwarded_host(r.metadata());
        let task_id = r.into_inner().task_id;
        let sb = self
            .shared
            .lock()
            .tasks
            .get(&task_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("Task {task_id} not found")))?;
        if !sb.is_running() {
            return Err(Status::failed_precondition(format!(
                "Task {task_id} has already finished"
            )));
        }
        let a = self.shared.access(&task_id, forwarded.as_deref());
        Ok(Response::new(api::TaskGetCommandRouterAccessResponse {
            jwt: a.jwt,
            url: a.url,
        }))
    }
}

impl Control {
    /// The tunnels of a sandbox, at once: they open with it, so the request's `timeout` never
    /// runs out (`GENERIC_STATUS_SUCCESS`).
    fn tunnels(
        &self,
        q: api::SandboxGetTunnelsRequest,
    ) -> Result<api::SandboxGetTunnelsResponse, Status> {
        let sb = self.shared.sandbox(&q.sandbox_id)?;
        Ok(api::SandboxGetTunnelsResponse {
            result: Some(api::GenericResult {
                status: GenericStatus::Success as i32,
                ..Default::default()
            }),
            tunnels: sb.tunnels(),
        })
    }

    fn by_name(
        &self,
        req: api::SandboxGetFromNameRequest,
    ) -> Result<api::SandboxGetFromNameResponse, Status> {
        let env = if req.environment_name.is_empty() {
            "main".to_owned()
        } else {
            req.environment_name.clone()
        };
        let st = self.shared.lock();
        let app_id = st.apps.get(&(env, req.app_name.clone())).cloned();
        let found = app_id.and_then(|app| {
            self.shared
                .shell
                .sandboxes()
                .lock()
                .values()
                .filter(|s| s.app_id == app && s.name.as_deref() == Some(&req.sandbox_name))
                .filter(|s| req.include_terminated || s.is_running())
                .max_by(|a, b| a.created_at.total_cmp(&b.created_at))
                .cloned()
        });
        match found {
            Some(sb) => Ok(api::SandboxGetFromNameResponse {
                sandbox_id: sb.id.clone(),
                metadata: Some(metadata(&sb)),
            }),
            None => Err(Status::not_found(format!(
                "Sandbox with name {:?} not found in app {:?}",
                req.sandbox_name, req.app_name
            ))),
        }
    }

    fn task_id(
        &self,
        req: api::SandboxGetTaskIdRequest,
    ) -> Result<api::SandboxGetTaskIdResponse, Status> {
        let sb = self.shared.sandbox(&req.sandbox_id)?;
        // Scheduling is immediate; a finished sandbox has no task to reach any more.
        Ok(match sb.result() {
            None => api::SandboxGetTaskIdResponse {
                task_id: Some(sb.task_id.clone()),
                task_result: None,
            },
            Some(result) => api::SandboxGetTaskIdResponse {
                task_id: None,
                task_result: Some(result),
            },
        })
    }

    fn list(&self, req: api::SandboxListRequest) -> api::SandboxListResponse {
        const PAGE: usize = 100;
        let wanted: BTreeMap<String, String> = req
            .tags
            .iter()
            .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
            .collect();
        let mut all: Vec<_> = self
            .shared
            .shell
            .sandboxes()
            .lock()
            .values()
            .filter(|s| req.app_id.is_empty() || s.app_id == req.app_id)
            .filter(|s| req.include_finished || s.is_running())
            .filter(|s| req.before_timestamp <= 0.0 || s.created_at < req.before_timestamp)
            .filter(|s| {
                let have = s.tags.lock().expect("tags");
                wanted
                    .iter()
                    .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            })
            .cloned()
            .collect();
        all.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        all.truncate(PAGE);
        let sandboxes = all
            .iter()
            .map(|s| api::SandboxInfo {
                id: s.id.clone(),
                created_at: s.created_at,
                task_info: Some(api::TaskInfo {
                    id: s.task_id.clone(),
                    started_at: s.created_at,
                    finished_at: *s.finished_at.lock().expect("finished"),
                    result: s.result(),
                    enqueued_at: s.created_at,
                    sandbox_id: s.id.clone(),
                    ..Default::default()
                }),
                app_id: s.app_id.clone(),
                tags: s.tags(),
                name: s.name.clone().unwrap_or_default(),
                image_id: s.image_id.clone(),
                timeout_secs: s.timeout_secs,
                metadata: Some(metadata(s)),
                ..Default::default()
            })
            .collect();
        api::SandboxListResponse { sandboxes }
    }

    fn set_tags(&self, req: api::SandboxTagsSetRequest) -> Result<Response<Empty>, Status> {
        let sb = self.shared.sandbox(&req.sandbox_id)?;
        *sb.tags.lock().expect("tags") = req
            .tags
            .into_iter()
            .map(|t| (t.tag_name, t.tag_value))
            .collect();
        Ok(Response::new(Empty {}))
    }

    fn terminate(&self, id: &str) -> Result<api::SandboxTerminateResponse, Status> {
        let sb = self.shared.sandbox(id)?;
        let existing = sb.result();
        sb.finish(GenericStatus::Terminated, 0, "Sandbox terminated");
        Ok(api::SandboxTerminateResponse {
            existing_result: existing,
        })
    }

    async fn wait(&self, req: api::SandboxWaitRequest) -> Result<api::SandboxWaitResponse, Status> {
        let sb = self.shared.sandbox(&req.sandbox_id)?;
        // A long poll of at most `timeout` seconds (the client uses 10, and 0 to poll).
        let limit = Duration::from_secs_f32(req.timeout.clamp(0.0, 55.0));
        if !limit.is_zero() {
            sb.wait_finished(limit).await;
        }
        Ok(api::SandboxWaitResponse {
            result: running_result(&sb),
            metadata: Some(metadata(&sb)),
        })
    }
}

fn map_request<A, B>(r: Request<A>, f: impl FnOnce(A) -> B) -> Request<B> {
    let (meta, ext, inner) = r.into_parts();
    Request::from_parts(meta, ext, f(inner))
}

fn futures_util_once<T: Send + Unpin + 'static>(item: T) -> impl Stream<Item = T> + Send {
    struct Once<T>(Option<T>);
    impl<T: Unpin> Stream for Once<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.take())
        }
    }
    Once(Some(item))
}

/// The address a reverse proxy says the client reached (`x-forwarded-host`), if any.
fn forwarded_host(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    metadata
        .get(execseam_emulator_kit::FORWARDED_HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .map(str::to_owned)
}
