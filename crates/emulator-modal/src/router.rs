//! `modal.task_command_router.TaskCommandRouter`: exec, stdio, stdin and wait for the processes
//! of one task, reached with `authorization: Bearer <router JWT>` (the only credential the
//! client sends to it, `_task_command_router_client.py` `_get_metadata`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use execseam_modal_proto::api::GenericResult;
use execseam_modal_proto::tcr::{
    self, task_command_router_server::TaskCommandRouter, task_exec_stdin_write_stream_request as ws,
};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::control::BoxStream;
use super::process::{self, Ended, Proc, StderrTo, StdinError};
use super::{ModalSandbox, Shared, Snapshotted, exec_env, now_secs, secret_env, spawn_status};
use execseam_emulator_kit::grpc::BodyFault;
use execseam_emulator_kit::{ConnControl, Fault, reset_connection};
use execseam_modal_proto::google::protobuf::Empty;

pub(crate) struct Router {
    pub(crate) shared: Arc<Shared>,
    /// Held from the look-up of an `exec_id` to its insertion: concurrent starts under one
    /// `exec_id` run one command.
    pub(crate) starting: tokio::sync::Mutex<()>,
}

/// The largest data message a stdio read sends.
const CHUNK: usize = 1024 * 1024;

fn task_gone(task_id: &str) -> Status {
    Status::not_found(format!("Task {task_id} not found"))
}

impl Router {
    /// The task the bearer token was issued for, if it is `task_id` and still running.
    fn task<T>(&self, r: &Request<T>, task_id: &str) -> Result<Arc<ModalSandbox>, Status> {
        match self.task_any(r, task_id)? {
            sb if sb.is_running() => {
                sb.touch();
                Ok(sb)
            }
            _ => Err(task_gone(task_id)),
        }
    }

    /// The task the bearer token was issued for, running or finished (the entrypoint's output
    /// is served after it exited: "Serves both live reads and post-exit reads",
    /// `_task_command_router_client.py` `sandbox_stdio_read`).
    fn task_any<T>(&self, r: &Request<T>, task_id: &str) -> Result<Arc<ModalSandbox>, Status> {
        let bearer = r
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        let st = self.shared.lock();
        match st.router_tokens.get(bearer) {
            Some((task, exp)) if task == task_id && *exp > now_secs() => {}
            Some((task, _)) if task == task_id => {
                return Err(Status::unauthenticated("token expired"));
            }
            _ => return Err(Status::unauthenticated("invalid token")),
        }
        st.tasks
            .get(task_id)
            .cloned()
            .ok_or_else(|| task_gone(task_id))
    }

    fn exec<T>(
        &self,
        r: &Request<T>,
        task_id: &str,
        exec_id: &str,
    ) -> Result<(Arc<ModalSandbox>, Arc<Proc>), Status> {
        let sb = self.task(r, task_id)?;
        let p = sb
            .exec(exec_id)
            .ok_or_else(|| Status::not_found(format!("Exec {exec_id} not found")))?;
        Ok((sb, p))
    }

    async fn fault(&self, route: &str) -> Result<Option<Fault>, Status> {
        self.shared.fault(route).await
    }

    /// What a snapshot request names: its running task (the main container, no
    /// customer-supplied key) and the image's expiry.
    fn snapshot_of<T>(
        &self,
        r: &Request<T>,
        task_id: &str,
        container_id: &str,
        encryption_key: bool,
        ttl_seconds: Option<i64>,
    ) -> Result<(Arc<ModalSandbox>, Option<u64>), Status> {
        let sb = self.task(r, task_id)?;
        main_container(container_id, encryption_key)?;
        Ok((sb, expiry(ttl_seconds)?))
    }

    fn vanish_soon(&self, sb: &Arc<ModalSandbox>) {
        let shared = self.shared.clone();
        let sb = sb.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            shared.vanish(&sb);
        });
    }
}

fn stdin_status(e: StdinError, exec_id: &str) -> Status {
    match e {
        // The client reads this as ConflictError (a dropped write after an early exit).
        StdinError::Closed => {
            Status::failed_precondition(format!("stdin of exec {exec_id} is closed"))
        }
        StdinError::Gap { accepted } => Status::out_of_range(format!(
            "stdin offset is past the {accepted} bytes written to exec {exec_id}"
        )),
        StdinError::Evicted => {
            Status::aborted(format!("a newer stdin stream took over exec {exec_id}"))
        }
    }
}

fn exit_of(e: Ended) -> (Option<i32>, Option<i32>) {
    match e {
        Ended::Code(c) => (Some(c), None),
        Ended::Signal(s) => (None, Some(s)),
    }
}

/// The terminal of a `pty_info` exec: its window size (24x80 where the client sent none: a
/// client without a terminal of its own sends 0, `modal/_output/pty.py` `get_pty_info`), and
/// the `TERM`, `COLORTERM`, `TERM_PROGRAM` it names added to the environment.
fn pty_of(
    info: &execseam_modal_proto::api::PtyInfo,
    env: &mut BTreeMap<String, String>,
) -> execseam_emulator_kit::PtySize {
    for (k, v) in [
        ("TERM", &info.env_term),
        ("COLORTERM", &info.env_colorterm),
        ("TERM_PROGRAM", &info.env_term_program),
    ] {
        if !v.is_empty() {
            env.insert(k.to_owned(), v.clone());
        }
    }
    let dim = |n: u32, default: u16| u16::try_from(n).ok().filter(|n| *n > 0).unwrap_or(default);
    execseam_emulator_kit::PtySize::new(dim(info.winsz_rows, 24), dim(info.winsz_cols, 80))
}

/// Waits for `p` to end while `sb` runs; `None` if the task went away first.
async fn wait_while_running(sb: &ModalSandbox, p: &Proc) -> Option<Ended> {
    let mut result = sb.result.subscribe();
    tokio::select! {
        e = process::wait(p) => Some(e),
        () = async { let _ = result.wait_for(Option::is_some).await; } => p.ended(),
    }
}

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_poll(
        &self,
        r: Request<tcr::TaskExecPollRequest>,
    ) -> Result<Response<tcr::TaskExecPollResponse>, Status> {
        let req = r.get_ref();
        let (_, p) = self.exec(&r, &req.task_id, &req.exec_id)?;
        use tcr::task_exec_poll_response::ExitStatus;
        let exit_status = p.ended().map(|e| match exit_of(e) {
            (Some(c), _) => ExitStatus::Code(c),
            (_, s) => ExitStatus::Signal(s.unwrap_or_default()),
        });
        Ok(Response::new(tcr::TaskExecPollResponse { exit_status }))
    }

    async fn task_exec_start(
        &self,
        r: Request<tcr::TaskExecStartRequest>,
    ) -> Result<Response<tcr::TaskExecStartResponse>, Status> {
        let fault = self.fault("exec").await?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let sb = self.task(&r, &r.get_ref().task_id)?;
        let req = r.into_inner();
        if req.exec_id.is_empty() {
            return Err(Status::invalid_argument("exec_id is required"));
        }
        // Idempotent on exec_id ("ensure exec commands are idempotent", the proto's comment):
        // a retried start does not run the command again, also when the retry arrives while the
        // first is still starting it (the client repeats the call on a transient error).
        let starting = self.starting.lock().await;
        if sb.exec(&req.exec_id).is_none() {
            if req.command_args.is_empty() {
                return Err(Status::invalid_argument("command_args must not be empty"));
            }
            if !req.container_id.is_empty() {
                return Err(Status::not_found(format!(
                    "Container {} not found",
                    req.container_id
                )));
            }
            if let Some(id) = req.secret_ids.first() {
                return Err(Status::not_found(format!("Secret {id} not found")));
            }
            let cwd = req.workdir.clone().unwrap_or_else(|| sb.workdir.clone());
            if !cwd.starts_with('/') {
                return Err(Status::invalid_argument(format!(
                    "workdir must be an absolute path, got: {cwd}"
                )));
            }
            let mut extra: BTreeMap<String, String> = secret_env(&req.secret_sources)?;
            extra.extend(req.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            let pty = req.pty_info.as_ref().map(|info| pty_of(info, &mut extra));
            use tcr::{TaskExecStderrConfig as E, TaskExecStdoutConfig as O};
            let spec = process::Spawn {
                argv: req.command_args.clone(),
                cwd,
                env: exec_env(&sb, &extra),
                stdout: O::try_from(req.stdout_config) == Ok(O::Pipe),
                stderr: match E::try_from(req.stderr_config) {
                    Ok(E::Pipe) => StderrTo::Pipe,
                    Ok(E::Stdout) => StderrTo::Stdout,
                    _ => StderrTo::Devnull,
                },
                timeout: req.timeout_secs.map(|s| Duration::from_secs(u64::from(s))),
                retain: None,
                pty,
            };
            let p = process::spawn(sb.sandbox(), &req.exec_id, spec)
                .await
                .map_err(spawn_status)?;
            let mut execs = sb.execs.lock().expect("execs");
            execs.entry(req.exec_id.clone()).or_insert(p);
        }
        drop(starting);
        let mut response = Response::new(tcr::TaskExecStartResponse {});
        match fault {
            Some(Fault::ServerError) => {
                return Err(Status::internal("emulated fault: internal error"));
            }
            Some(Fault::ResetBeforeResponse) => return reset_connection(ctl.as_ref()).await,
            Some(Fault::CutBeforeExit) => {
                if let Some(p) = sb.exec(&req.exec_id) {
                    process::cut(&p);
                }
            }
            Some(Fault::MalformedBody) => {
                response.extensions_mut().insert(BodyFault::Malformed);
            }
            Some(Fault::SandboxVanishes) => self.vanish_soon(&sb),
            _ => {}
        }
        Ok(response)
    }

    async fn task_exec_stdin_status(
        &self,
        r: Request<tcr::TaskExecStdinStatusRequest>,
    ) -> Result<Response<tcr::TaskExecStdinStatusResponse>, Status> {
        let req = r.get_ref();
        let (_, p) = self.exec(&r, &req.task_id, &req.exec_id)?;
        let (num_bytes_written, closed) = p.stdin_status();
        Ok(Response::new(tcr::TaskExecStdinStatusResponse {
            num_bytes_written,
            closed,
        }))
    }

    async fn task_exec_stdin_write(
        &self,
        r: Request<tcr::TaskExecStdinWriteRequest>,
    ) -> Result<Response<tcr::TaskExecStdinWriteResponse>, Status> {
        let fault = self.fault("stdin").await?;
        let req = r.get_ref();
        let (_, p) = self.exec(&r, &req.task_id, &req.exec_id)?;
        p.write_stdin(req.offset, &req.data, req.eof, None)
            .map_err(|e| stdin_status(e, &req.exec_id))?;
        if fault == Some(Fault::ServerError) {
            return Err(Status::internal("emulated fault: internal error"));
        }
        Ok(Response::new(tcr::TaskExecStdinWriteResponse {}))
    }

    async fn task_exec_stdin_write_stream(
        &self,
        r: Request<Streaming<tcr::TaskExecStdinWriteStreamRequest>>,
    ) -> Result<Response<tcr::TaskExecStdinWriteStreamResponse>, Status> {
        self.fault("stdin").await?;
        let (meta, ext, mut stream) = r.into_parts();
        let first = stream.message().await?;
        let Some(ws::Payload::Start(start)) = first.and_then(|m| m.payload) else {
            return Err(Status::invalid_argument(
                "the first message of a stdin stream must be `start`",
            ));
        };
        let probe = Request::from_parts(meta, ext, ());
        let (_, p) = self.exec(&probe, &start.task_id, &start.exec_id)?;
        let ticket = p.stdin_ticket();
        let mut offset = start.offset;
        p.write_stdin(offset, &[], false, Some(ticket))
            .map_err(|e| stdin_status(e, &start.exec_id))?;
        while let Some(msg) = stream.message().await? {
            match msg.payload {
                Some(ws::Payload::Data(data)) => {
                    p.write_stdin(offset, &data, false, Some(ticket))
                        .map_err(|e| stdin_status(e, &start.exec_id))?;
                    offset += data.len() as u64;
                }
                Some(ws::Payload::End(_)) => {
                    p.write_stdin(offset, &[], true, Some(ticket))
                        .map_err(|e| stdin_status(e, &start.exec_id))?;
                    return Ok(Response::new(tcr::TaskExecStdinWriteStreamResponse {}));
                }
                Some(ws::Payload::Start(_)) | None => {
                    return Err(Status::invalid_argument(
                        "`start` may only be the first message of a stdin stream",
                    ));
                }
            }
        }
        // Ended without `end`: stdin stays open (the stream is resumable).
        Ok(Response::new(tcr::TaskExecStdinWriteStreamResponse {}))
    }

    type TaskExecStdioReadStream = BoxStream<tcr::TaskExecStdioReadResponse>;

    async fn task_exec_stdio_read(
        &self,
        r: Request<tcr::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        let fault = self.fault("stdio").await?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let req = r.get_ref().clone();
        let (sb, p) = self.exec(&r, &req.task_id, &req.exec_id)?;
        let fd = match tcr::TaskExecStdioFileDescriptor::try_from(req.file_descriptor) {
            Ok(tcr::TaskExecStdioFileDescriptor::Stderr) => 1,
            _ => 0,
        };
        let cut = p.cut.load(Ordering::SeqCst) || fault == Some(Fault::CutBeforeExit);
        let reset = (fault == Some(Fault::ResetBeforeResponse))
            .then_some(ctl)
            .flatten();
        let rx = spool_stream(p, fd, req.offset, Some(sb), reset, |_, data| {
            tcr::TaskExecStdioReadResponse { data }
        });
        let stream: Self::TaskExecStdioReadStream = Box::pin(Receiver(rx));
        let mut response = Response::new(stream);
        if cut {
            response.extensions_mut().insert(BodyFault::StripTrailers);
        }
        if fault == Some(Fault::MalformedBody) {
            response.extensions_mut().insert(BodyFault::Malformed);
        }
        Ok(response)
    }

    async fn sandbox_stdin_write_v2(
        &self,
        r: Request<tcr::SandboxStdinWriteV2Request>,
    ) -> Result<Response<tcr::SandboxStdinWriteV2Response>, Status> {
        self.fault("stdin").await?;
        let req = r.get_ref();
        let sb = self.task_any(&r, &req.task_id)?;
        sb.touch();
        match sb.entrypoint() {
            // Same offset rules as an exec's stdin (a retry's overlap dropped, a gap refused,
            // a second EOF ignored: "the command router will ignore the second EOF",
            // io_streams.py `_StreamWriterThroughCommandRouterBuffer.drain`); once the
            // entrypoint exited, FAILED_PRECONDITION, which the client raises as ValueError.
            Some(p) => p
                .write_stdin(req.offset, &req.data, req.eof, None)
                .map_err(|e| stdin_status(e, "entrypoint"))?,
            // No entrypoint: the sandbox idles (the image's `sleep`), its stdin read by nobody.
            None if sb.is_running() => {}
            None => return Err(Status::failed_precondition("the sandbox has finished")),
        }
        Ok(Response::new(tcr::SandboxStdinWriteV2Response {}))
    }

    type SandboxStdioReadV2Stream = BoxStream<tcr::SandboxStdioReadV2Response>;

    async fn sandbox_stdio_read_v2(
        &self,
        r: Request<tcr::SandboxStdioReadV2Request>,
    ) -> Result<Response<Self::SandboxStdioReadV2Stream>, Status> {
        let fault = self.fault("stdio").await?;
        let ctl = r.extensions().get::<ConnControl>().cloned();
        let req = r.get_ref().clone();
        let sb = self.task_any(&r, &req.task_id)?;
        sb.touch();
        let fd = match tcr::SandboxStdioFileDescriptor::try_from(req.file_descriptor) {
            Ok(tcr::SandboxStdioFileDescriptor::Stdout) => 0,
            Ok(tcr::SandboxStdioFileDescriptor::Stderr) => 1,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "unknown file descriptor {}",
                    req.file_descriptor
                )));
            }
        };
        let reset = (fault == Some(Fault::ResetBeforeResponse))
            .then_some(ctl)
            .flatten();
        // Each message says where its bytes start: past the requested offset when the bytes
        // before are no longer retained (the client logs "dropped N bytes" and goes on,
        // io_streams.py `_stdio_stream_from_sandbox_command_router`).
        let make = |start, data| tcr::SandboxStdioReadV2Response {
            data,
            starting_offset: start,
        };
        let rx = match sb.entrypoint() {
            // The entrypoint's streams outlive it: read to their end, not the task's.
            Some(p) => spool_stream(p.clone(), fd, req.offset, None, reset, make),
            // No entrypoint: nothing is ever written; the stream ends with the sandbox.
            None => {
                let (tx, rx) = mpsc::channel(1);
                tokio::spawn(async move {
                    let mut result = sb.result.subscribe();
                    tokio::select! {
                        _ = result.wait_for(Option::is_some) => {}
                        () = tx.closed() => {}
                    }
                });
                rx
            }
        };
        let stream: Self::SandboxStdioReadV2Stream = Box::pin(Receiver(rx));
        let mut response = Response::new(stream);
        if fault == Some(Fault::CutBeforeExit) {
            response.extensions_mut().insert(BodyFault::StripTrailers);
        }
        if fault == Some(Fault::MalformedBody) {
            response.extensions_mut().insert(BodyFault::Malformed);
        }
        Ok(response)
    }

    async fn task_exec_wait(
        &self,
        r: Request<tcr::TaskExecWaitRequest>,
    ) -> Result<Response<tcr::TaskExecWaitResponse>, Status> {
        let fault = self.fault("wait").await?;
        let req = r.get_ref().clone();
        let (sb, p) = self.exec(&r, &req.task_id, &req.exec_id)?;
        let Some(ended) = wait_while_running(&sb, &p).await else {
            return Err(task_gone(&req.task_id));
        };
        use tcr::task_exec_wait_response::ExitStatus;
        let exit_status = Some(match exit_of(ended) {
            (Some(c), _) => ExitStatus::Code(c),
            (_, s) => ExitStatus::Signal(s.unwrap_or_default()),
        });
        let mut response = Response::new(tcr::TaskExecWaitResponse { exit_status });
        if p.cut.load(Ordering::SeqCst) || fault == Some(Fault::CutBeforeExit) {
            response.extensions_mut().insert(BodyFault::StripTrailers);
        }
        if fault == Some(Fault::MalformedBody) {
            response.extensions_mut().insert(BodyFault::Malformed);
        }
        if fault == Some(Fault::ServerError) {
            return Err(Status::internal("emulated fault: internal error"));
        }
        Ok(response)
    }

    /// `Sandbox.snapshot_filesystem(timeout, ttl=)` (`sandbox/_common.py`
    /// `snapshot_filesystem_via_tcr`): the sandbox's filesystem as a new image, retained for
    /// `ttl_seconds` (`-1`: indefinitely, `TTL_NO_EXPIRY_SENTINEL`). The kit copies the
    /// sandbox's writable layer while its processes are frozen; then they run on.
    async fn task_snapshot_filesystem(
        &self,
        r: Request<tcr::TaskSnapshotFilesystemRequest>,
    ) -> Result<Response<tcr::TaskSnapshotFilesystemResponse>, Status> {
        let req = r.get_ref();
        let key = req.customer_supplied_encryption_key.is_some();
        let (sb, expires_at) =
            self.snapshot_of(&r, &req.task_id, &req.container_id, key, req.ttl_seconds)?;
        let image_id = self.shared.snapshot_sandbox(&sb, expires_at).await?;
        Ok(Response::new(tcr::TaskSnapshotFilesystemResponse {
            image_id,
        }))
    }

    /// `Sandbox.snapshot_directory(path, timeout, ttl=)` (`sandbox/_common.py`
    /// `snapshot_directory_via_tcr`): the directory's contents as a new image (copied while the
    /// sandbox is frozen; it runs on), kept for `ttl_seconds` as a filesystem snapshot is. The
    /// client's retries carry the call's `snapshot_id` (a uuid) and get the same image.
    async fn task_snapshot_directory(
        &self,
        r: Request<tcr::TaskSnapshotDirectoryRequest>,
    ) -> Result<Response<tcr::TaskSnapshotDirectoryResponse>, Status> {
        let req = r.get_ref();
        let key = req.customer_supplied_encryption_key.is_some();
        let (sb, expires_at) =
            self.snapshot_of(&r, &req.task_id, &req.container_id, key, req.ttl_seconds)?;
        let path = path_of(&req.path)?;
        let done = self
            .shared
            .lock()
            .dir_snapshot_ids
            .get(&req.snapshot_id)
            .cloned();
        let image_id = match done {
            Some(id) if !req.snapshot_id.is_empty() => id,
            _ => {
                let image = sb
                    .sandbox()
                    .snapshot_dir(&path)
                    .await
                    .map_err(|e| path_status(e, &path))?;
                let id = self
                    .shared
                    .add_snapshot(Snapshotted::Directory(image), expires_at);
                self.shared
                    .lock()
                    .dir_snapshot_ids
                    .insert(req.snapshot_id.clone(), id.clone());
                id
            }
        };
        Ok(Response::new(tcr::TaskSnapshotDirectoryResponse {
            image_id,
        }))
    }

    /// `Sandbox.mount_image(path, image)` (`sandbox/_common.py` `mount_image_via_tcr`): a copy
    /// of a directory snapshot (or, for `Image.from_scratch()`, sent as `image_id` "", an empty
    /// directory) mounted at `path`, created if missing, hiding what was there until
    /// `unmount_image` ("If it exists and contains data, the previous directory will be replaced
    /// by the mount", `sandbox/_sandbox.py`). The mount is the sandbox's own: writes under it
    /// change neither the image nor the sandbox it came from.
    async fn task_mount_directory(
        &self,
        r: Request<tcr::TaskMountDirectoryRequest>,
    ) -> Result<Response<Empty>, Status> {
        let req = r.get_ref().clone();
        let sb = self.task(&r, &req.task_id)?;
        main_container(
            &req.container_id,
            req.customer_supplied_encryption_key.is_some(),
        )?;
        let path = path_of(&req.path)?;
        let image = match req.image_id.as_str() {
            "" => None,
            id => Some(self.shared.mountable(id)?),
        };
        let mut mounts = sb.mounts.lock().await;
        sb.sandbox()
            .mount_dir(&path, image.as_ref())
            .await
            .map_err(|e| path_status(e, &path))?;
        mounts.push(path);
        Ok(Response::new(Empty {}))
    }

    /// `Sandbox.unmount_image(path)` (`sandbox/_common.py` `unmount_image_via_tcr`): `path`
    /// must be where `mount_image` mounted (the client docs: "the exact mount point"); what was
    /// beneath shows again. Any other path is `NOT_FOUND` (inferred).
    async fn task_unmount_directory(
        &self,
        r: Request<tcr::TaskUnmountDirectoryRequest>,
    ) -> Result<Response<Empty>, Status> {
        let req = r.get_ref().clone();
        let sb = self.task(&r, &req.task_id)?;
        main_container(&req.container_id, false)?;
        let path = path_of(&req.path)?;
        let mut mounts = sb.mounts.lock().await;
        let Some(at) = mounts.iter().rposition(|m| *m == path) else {
            return Err(Status::not_found(format!("No image is mounted at {path}")));
        };
        sb.sandbox()
            .unmount_dir(&path)
            .await
            .map_err(|e| path_status(e, &path))?;
        // Mounts made under it later went with it (a detached mount takes its submounts).
        let inside = format!("{path}/");
        let mut i = 0;
        mounts.retain(|m| {
            i += 1;
            i <= at || !m.starts_with(&inside)
        });
        mounts.remove(at);
        Ok(Response::new(Empty {}))
    }
}

/// Snapshots and mounts act on the sandbox's main container only, without a customer-supplied
/// key: sidecars and encryption keys are not emulated.
fn main_container(container_id: &str, encryption_key: bool) -> Result<(), Status> {
    if !container_id.is_empty() {
        return Err(Status::not_found(format!(
            "Container {container_id} not found (sidecars are not emulated)"
        )));
    }
    if encryption_key {
        return Err(Status::unimplemented(
            "customer-supplied encryption keys are not emulated",
        ));
    }
    Ok(())
}

/// A snapshot's `ttl_seconds` as its expiry: `-1` (`TTL_NO_EXPIRY_SENTINEL`, the client's
/// `ttl=None`) never; absent (older clients) is taken as never too (inferred).
fn expiry(ttl_seconds: Option<i64>) -> Result<Option<u64>, Status> {
    match ttl_seconds.unwrap_or(-1) {
        -1 => Ok(None),
        t if t > 0 => Ok(Some(now_secs().saturating_add(t.unsigned_abs()))),
        t => Err(Status::invalid_argument(format!(
            "ttl_seconds must be positive or -1, got {t}"
        ))),
    }
}

/// A request's `path` (the client sends `PurePosixPath(path).as_posix()` as UTF-8,
/// `sandbox/_common.py` `absolute_path_bytes`).
fn path_of(bytes: &[u8]) -> Result<String, Status> {
    let path =
        std::str::from_utf8(bytes).map_err(|_| Status::invalid_argument("path is not UTF-8"))?;
    if !path.starts_with('/') {
        return Err(Status::invalid_argument(format!(
            "path must be absolute; got: {path}"
        )));
    }
    match path.trim_end_matches('/') {
        "" => Ok("/".to_owned()),
        p => Ok(p.to_owned()),
    }
}

/// A directory snapshot's or mount's failure (the codes are inferred: the service's are not
/// published).
fn path_status(e: std::io::Error, path: &str) -> Status {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => Status::not_found(format!("{path}: no such directory")),
        K::NotADirectory => Status::invalid_argument(format!("{path} is not a directory")),
        K::InvalidInput => Status::invalid_argument(e.to_string()),
        K::Unsupported => Status::unimplemented(e.to_string()),
        _ => Status::internal(format!("{path}: {e}")),
    }
}

/// Streams stream `fd` of `p` from byte `offset` as `make(start, bytes)` messages until its end
/// (then the stream ends OK). With `task`, the stream ends with `UNAVAILABLE` if that task goes
/// away first (an exec's output); with `reset`, the connection is reset after the first message.
fn spool_stream<T: Send + 'static>(
    p: Arc<Proc>,
    fd: usize,
    offset: u64,
    task: Option<Arc<ModalSandbox>>,
    reset: Option<ConnControl>,
    make: impl Fn(u64, bytes::Bytes) -> T + Send + 'static,
) -> mpsc::Receiver<Result<T, Status>> {
    let (tx, rx) = mpsc::channel::<Result<T, Status>>(4);
    tokio::spawn(async move {
        let mut offset = offset;
        let mut changed = p.subscribe();
        let mut result = task.as_ref().map(|sb| sb.result.subscribe());
        loop {
            let (start, chunk, done) = p.read(fd, offset, CHUNK);
            if !chunk.is_empty() {
                offset = start + chunk.len() as u64;
                if tx.send(Ok(make(start, chunk))).await.is_err() {
                    return;
                }
                if let Some(c) = &reset {
                    c.reset();
                    return;
                }
                continue;
            }
            if done {
                return; // OK: everything of this stream was delivered
            }
            tokio::select! {
                r = changed.changed() => if r.is_err() { return; },
                () = ended(&mut result) => {
                    // The task went away mid-stream (terminated, timed out, vanished).
                    let (start, rest, _) = p.read(fd, offset, usize::MAX);
                    if !rest.is_empty() {
                        let _ = tx.send(Ok(make(start, rest))).await;
                    }
                    let _ = tx.send(Err(Status::unavailable("the task is no longer running"))).await;
                    return;
                }
                () = tx.closed() => return,
            }
        }
    });
    rx
}

/// Resolves once the sandbox behind `result` has finished; never without one.
async fn ended(result: &mut Option<tokio::sync::watch::Receiver<Option<GenericResult>>>) {
    match result {
        Some(r) => {
            let _ = r.wait_for(Option::is_some).await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// An mpsc receiver as a stream.
struct Receiver<T>(mpsc::Receiver<T>);

impl<T> futures_core::Stream for Receiver<T> {
    type Item = T;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
