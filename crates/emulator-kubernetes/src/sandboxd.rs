//! A model of agent-sandbox's `sandboxd` `ProcessService` (`packages/sandboxd/pkg/server/
//! process.go` and `pkg/processmanager` at `2fd412d`), served on 9090 in a pod whose container
//! runs the sandboxd image (reached through `pods/portforward`). Its semantics, not execseam's:
//!
//! - `Start`: `InitEvent{process_id}` first (a daemon-wide counter from 1, not the OS pid), then
//!   stdout and stderr chunks (4096 bytes at most) as they come, then `ExitEvent{exit_code}`.
//!   The process leads its own group (`Setpgid`), stdin is a pipe that stays open until
//!   `WriteStdin{eof}`. The exit code is Go's `ExitError.ExitCode()`: **-1 for a signal death**,
//!   whatever the signal. The exit is sent once the leader is reaped and the pipes drained, or
//!   5 s after the leader (`pipeDrainGrace`) when something else still holds them.
//! - A dropped `Start` stream cancels the command's context: `exec.CommandContext` kills **the
//!   leader only** (`Process.Kill`), its group lives on (agent-sandbox#369).
//! - The environment is the daemon's (the container's) with the request's variables over it;
//!   `cwd` is confined to the root (`--root-dir`, default `/workspace`) as `pathutil.
//!   SanitizePath` does: an absolute path is taken under the root, `..` out of it is
//!   `PERMISSION_DENIED` (symlinks are not resolved here: documented gap). A command that cannot
//!   start is `NOT_FOUND`/`PERMISSION_DENIED`/`INTERNAL` (`mapCommandError`).
//! - `SendSignal`: SIGINT, SIGTERM or SIGKILL to the process group (`kill(-pid)`); another
//!   value is `INVALID_ARGUMENT`, an unknown id `NOT_FOUND`, a finished process a no-op.
//! - `WriteStdin`: bytes, or `eof` closing the pipe. `Execute`: buffered, same exit rules.
//! - PTY processes (`Start{pty}`, `ResizeTTY`) are not modelled: `UNIMPLEMENTED`.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_emulator_kit::User;
use execseam_emulator_kit::util::clean_path as clean;
use execseam_sandboxd_proto as pb;
use futures_util::Stream;
use pb::process_service_server::{ProcessService, ProcessServiceServer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tonic::{Request, Response, Status};

use crate::pods::{ContainerRun, PodRun};

/// sandboxd's gRPC port (`--grpc-port` default).
pub const GRPC_PORT: u16 = 9090;
/// sandboxd's root (`--root-dir` default).
pub const ROOT: &str = "/workspace";
/// `defaultStreamChunkSize`.
const CHUNK: usize = 4096;
/// `pipeDrainGrace`.
const PIPE_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// True when `image` is agent-sandbox's sandboxd (its repository's last path segment).
pub fn is_sandboxd(image: &str) -> bool {
    let repo = image.split('@').next().unwrap_or("");
    let last = repo.rsplit('/').next().unwrap_or("");
    last.split(':').next() == Some("sandboxd")
}

/// The daemon's process registry (`processmanager.ProcessRegistry`).
#[derive(Default)]
pub struct Registry {
    next: AtomicI32,
    processes: Mutex<HashMap<i32, Arc<Managed>>>,
}

struct Managed {
    host_pid: u32,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    completed: AtomicBool,
}

impl Registry {
    fn get(&self, id: i32) -> Result<Arc<Managed>, Status> {
        self.processes
            .lock()
            .expect("registry")
            .get(&id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("process {id} not found")))
    }
}

/// The `ProcessService` of the pod's sandboxd, as the router a port-forward reaches.
pub fn grpc(run: Arc<PodRun>) -> axum::Router {
    tonic::service::Routes::new(ProcessServiceServer::new(Daemon { run })).into_axum_router()
}

struct Daemon {
    run: Arc<PodRun>,
}

/// `pathutil.SanitizePath(ROOT, path)`, lexically.
fn sanitize(path: &str) -> Result<String, Status> {
    let escapes = || {
        Status::permission_denied(format!(
            "cwd: access denied: path {path:?}: path escapes sandbox root"
        ))
    };
    // An absolute path is cleaned first (no `..` survives) and taken under the root; a
    // relative one is joined to the root, where `..` can climb out.
    let joined = if path.starts_with('/') {
        let user = clean(path);
        let rel = if user == ROOT {
            ""
        } else {
            user.strip_prefix(&format!("{ROOT}/")).unwrap_or(&user)
        };
        clean(&format!("{ROOT}/{rel}"))
    } else {
        clean(&format!("{ROOT}/{path}"))
    };
    if joined != ROOT && !joined.starts_with(&format!("{ROOT}/")) {
        return Err(escapes());
    }
    Ok(joined)
}

/// `mapCommandError`.
fn start_error(e: &execseam_spawn::SpawnError, argv0: &str, msg: &str) -> Status {
    match e {
        execseam_spawn::SpawnError::Workdir(w) => Status::not_found(format!(
            "{msg}: command or path not found: chdir {w}: no such file or directory"
        )),
        execseam_spawn::SpawnError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            Status::not_found(format!(
                "{msg}: command or path not found: exec: {argv0:?}: executable file not found in $PATH"
            ))
        }
        execseam_spawn::SpawnError::Io(io) if io.kind() == std::io::ErrorKind::PermissionDenied => {
            Status::permission_denied(format!(
                "{msg}: permission denied: fork/exec {argv0}: permission denied"
            ))
        }
        execseam_spawn::SpawnError::Io(io) => Status::internal(format!("{msg}: {io}")),
    }
}

/// Go's `ExitError.ExitCode()`: -1 for a signal death.
fn exit_code(s: std::io::Result<std::process::ExitStatus>) -> i32 {
    s.ok().and_then(|s| s.code()).unwrap_or(-1)
}

impl Daemon {
    fn container(&self) -> Result<&ContainerRun, Status> {
        self.run
            .containers
            .iter()
            .find(|c| c.sandboxd)
            .ok_or_else(|| Status::unavailable("sandboxd is not running"))
    }

    /// `buildCommand`: the command, its working directory and user.
    fn build(
        &self,
        config: Option<&pb::ProcessConfig>,
    ) -> Result<(tokio::process::Command, String, User, String), Status> {
        let Some(config) = config.filter(|c| !c.command.is_empty()) else {
            return Err(Status::invalid_argument("command is required"));
        };
        let container = self.container()?;
        let cwd = match config.cwd.as_deref() {
            Some(c) if !c.is_empty() => sanitize(c)?,
            _ => ROOT.to_owned(),
        };
        let mut env: BTreeMap<String, String> = container.env.clone();
        env.entry("HOME".into())
            .or_insert_with(|| container.user.home.clone());
        env.extend(config.env_vars.clone());
        let mut cmd = tokio::process::Command::new(&config.command[0]);
        cmd.args(&config.command[1..]).env_clear().envs(env);
        Ok((cmd, cwd, container.user.clone(), config.command[0].clone()))
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<pb::StartResponse, Status>> + Send>>;

fn event(e: pb::start_response::Event) -> Result<pb::StartResponse, Status> {
    Ok(pb::StartResponse { event: Some(e) })
}

fn pump(
    mut reader: impl AsyncRead + Unpin + Send + 'static,
    stderr: bool,
    tx: tokio::sync::mpsc::Sender<Result<pb::StartResponse, Status>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; CHUNK];
        while let Ok(n @ 1..) = reader.read(&mut buf).await {
            let chunk = bytes::Bytes::copy_from_slice(&buf[..n]);
            let e = if stderr {
                pb::start_response::Event::Stderr(chunk)
            } else {
                pb::start_response::Event::Stdout(chunk)
            };
            if tx.send(event(e)).await.is_err() {
                return;
            }
        }
    })
}

#[tonic::async_trait]
impl ProcessService for Daemon {
    type StartStream = Events;

    async fn start(&self, request: Request<pb::StartRequest>) -> Result<Response<Events>, Status> {
        let request = request.into_inner();
        if request.pty.is_some() {
            return Err(Status::unimplemented(
                "PTY processes are not modelled by the emulator",
            ));
        }
        let (mut cmd, cwd, user, argv0) = self.build(request.config.as_ref())?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawned = self
            .run
            .sandbox
            .spawn(cmd, &user, &cwd)
            .await
            .map_err(|e| start_error(&e, &argv0, "failed to start command"))?;
        let mut child = spawned.child;
        let id = self.run.processes.next.fetch_add(1, Ordering::SeqCst) + 1;
        let managed = Arc::new(Managed {
            host_pid: spawned.host_pid,
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            completed: AtomicBool::new(false),
        });
        // Registered before the InitEvent, as the daemon does.
        self.run
            .processes
            .processes
            .lock()
            .expect("registry")
            .insert(id, managed.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let _ = tx
            .send(event(pb::start_response::Event::Init(pb::InitEvent {
                process_id: id,
            })))
            .await;
        let readers = [
            child.stdout.take().map(|r| pump(r, false, tx.clone())),
            child.stderr.take().map(|r| pump(r, true, tx.clone())),
        ];
        let run = self.run.clone();
        let task = tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                () = tx.closed() => {
                    // The stream's context is cancelled: `exec.CommandContext` kills the leader.
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            let drained = async {
                for r in readers.iter().flatten() {
                    while !r.is_finished() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            };
            if tokio::time::timeout(PIPE_DRAIN_GRACE, drained)
                .await
                .is_err()
            {
                for r in readers.iter().flatten() {
                    r.abort();
                }
            }
            managed.completed.store(true, Ordering::SeqCst);
            run.processes
                .processes
                .lock()
                .expect("registry")
                .remove(&id);
            let _ = tx
                .send(event(pb::start_response::Event::Exit(pb::ExitEvent {
                    exit_code: exit_code(status),
                })))
                .await;
        });
        self.run.sandbox.track(task.abort_handle());
        let events =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
            );
        Ok(Response::new(Box::pin(events)))
    }

    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        let (mut cmd, cwd, user, argv0) = self.build(request.into_inner().config.as_ref())?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = self
            .run
            .sandbox
            .spawn(cmd, &user, &cwd)
            .await
            .map_err(|e| start_error(&e, &argv0, "failed to execute command"))?;
        let out = child
            .child
            .wait_with_output()
            .await
            .map_err(|e| Status::internal(format!("failed to execute command: {e}")))?;
        Ok(Response::new(pb::ExecuteResponse {
            exit_code: out.status.code().unwrap_or(-1),
            stdout: out.stdout.into(),
            stderr: out.stderr.into(),
        }))
    }

    async fn write_stdin(
        &self,
        request: Request<pb::WriteStdinRequest>,
    ) -> Result<Response<pb::WriteStdinResponse>, Status> {
        let request = request.into_inner();
        let managed = self.run.processes.get(request.process_id)?;
        let mut stdin = managed.stdin.lock().await;
        match request.payload {
            Some(pb::write_stdin_request::Payload::Eof(_)) => *stdin = None,
            Some(pb::write_stdin_request::Payload::Input(input)) if !input.is_empty() => {
                let Some(w) = stdin.as_mut() else {
                    return Err(Status::internal(
                        "failed to write stdin: write |1: file already closed",
                    ));
                };
                if let Err(e) = w.write_all(&input).await {
                    return Err(Status::internal(format!("failed to write stdin: {e}")));
                }
            }
            _ => {}
        }
        Ok(Response::new(pb::WriteStdinResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<pb::SendSignalRequest>,
    ) -> Result<Response<pb::SendSignalResponse>, Status> {
        let request = request.into_inner();
        let managed = self.run.processes.get(request.process_id)?;
        let signal = match pb::Signal::try_from(request.signal) {
            Ok(pb::Signal::Sigint) => libc::SIGINT,
            Ok(pb::Signal::Sigterm) => libc::SIGTERM,
            Ok(pb::Signal::Sigkill) => libc::SIGKILL,
            Ok(s) => {
                return Err(Status::invalid_argument(format!(
                    "unsupported or unspecified signal: {}",
                    s.as_str_name()
                )));
            }
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "unsupported or unspecified signal: {}",
                    request.signal
                )));
            }
        };
        if !managed.completed.load(Ordering::SeqCst) {
            // The group (`ManagedProcess.Signal`: `kill(-pid)`; its fallback to the process
            // alone fails the same way once the group is gone).
            if let Err(e) = self.run.sandbox.signal_group(managed.host_pid, signal) {
                return Err(Status::internal(format!("failed to send signal: {e}")));
            }
        }
        Ok(Response::new(pb::SendSignalResponse {}))
    }

    async fn resize_tty(
        &self,
        request: Request<pb::ResizeTtyRequest>,
    ) -> Result<Response<pb::ResizeTtyResponse>, Status> {
        self.run.processes.get(request.into_inner().process_id)?;
        Err(Status::failed_precondition(
            "failed to resize TTY: process is completed or has no active PTY",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_and_paths_as_sandboxd_sees_them() {
        assert!(is_sandboxd(
            "us-central1-docker.pkg.dev/k8s-staging-images/agent-sandbox/sandboxd:latest-main"
        ));
        assert!(is_sandboxd("sandboxd"));
        assert!(!is_sandboxd(
            "registry.k8s.io/agent-sandbox/python-runtime-sandbox:latest"
        ));
        assert_eq!(sanitize("/tmp").unwrap(), "/workspace/tmp");
        assert_eq!(sanitize("/workspace/a/../b").unwrap(), "/workspace/b");
        assert_eq!(sanitize("/workspace").unwrap(), "/workspace");
        assert_eq!(sanitize("sub").unwrap(), "/workspace/sub");
        assert_eq!(sanitize("/../etc").unwrap(), "/workspace/etc");
        assert_eq!(
            sanitize("a/../../etc").unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            sanitize("../etc").unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
    }
}
