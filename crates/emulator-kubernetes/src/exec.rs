//! `pods/exec` over WebSocket, as the apiserver's stream translator (`v5.channel.k8s.io`) and the
//! kubelet's WebSocket server (`v4.channel.k8s.io`) serve it.
//!
//! Before the upgrade, errors are ordinary `Status` answers (`pkg/registry/core/pod/strategy.go`
//! `streamLocation`/`validateContainer`): the pod missing (404), a container to name or unknown
//! (400), the pod not scheduled (400), none of stdin/stdout/stderr (400). The protocol is the
//! first of the client's offers the server speaks (`wsstream/conn.go handshake`), named in the
//! answer's `Sec-WebSocket-Protocol`; none: a bare 403 (x/net/websocket's handshake failure).
//! Then: an empty message on the lowest writable channel; stdin (binary or text frames) on
//! channel 0; `[255, 0]` closes stdin (v5); resizes on channel 4 (`{"Width","Height"}`, tty);
//! stdout and stderr as they come; the `metav1.Status` once on channel 3; the close. A command
//! the runtime cannot start is an `InternalError` status (containerd's "executable file not
//! found"), never an exit code. A client that goes away does not kill the command (only its
//! stdin ends), as on a real cluster.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_websockets::{Limits, Message, WebSocketStream};

use crate::cluster::Cluster;
use crate::pods::{ContainerRun, PodRun};
use crate::schema::PODS;
use crate::status;
use execseam_emulator_kit::{Fault, PtySize};

pub(crate) type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The channel protocols served, in the server's order of preference (the client's order
/// decides).
pub const PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io"];

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn flag(q: &[(String, String)], name: &str) -> bool {
    param(q, name)
        .and_then(crate::api::parse_bool)
        .unwrap_or(false)
}

/// What a fault does to an exec once it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InStream {
    /// The status says `InternalError` after the command ran (HTTP 500's "may have run").
    Internal,
    /// The socket closes after the output, without the status.
    Cut,
    /// The status is not JSON.
    Malformed,
    /// The pod is deleted while the command runs.
    Vanish,
}

/// Counts one request of the exec path (`pods/exec`, or a `pods/portforward`, which carries
/// sandboxd's commands) and takes its fault: those answered before the upgrade are answered
/// here (`Err`), the others come back to act in the stream.
/// `ctl` is the request's connection control (the request itself is not `Sync`: no borrow of it
/// may live across an await).
pub(crate) async fn take_fault(
    cluster: &Cluster,
    ctl: Option<execseam_emulator_kit::ConnControl>,
) -> Result<Option<InStream>, Response> {
    match cluster.faults().take("exec") {
        None => {}
        Some(Fault::Unavailable) => {
            return Err(status::unavailable(
                "the server is currently unable to handle the request",
            )
            .into_response());
        }
        Some(Fault::AuthFailure) => return Err(status::unauthorized().into_response()),
        Some(Fault::ResetBeforeResponse) => {
            return Err(execseam_emulator_kit::reset_connection(ctl.as_ref()).await);
        }
        Some(Fault::Latency(d)) => tokio::time::sleep(d).await,
        Some(Fault::ServerError) => return Ok(Some(InStream::Internal)),
        Some(Fault::CutBeforeExit) => return Ok(Some(InStream::Cut)),
        Some(Fault::MalformedBody) => return Ok(Some(InStream::Malformed)),
        Some(Fault::SandboxVanishes) => return Ok(Some(InStream::Vanish)),
        Some(_) => {}
    }
    Ok(None)
}

/// The sandbox vanishing: what owns the pod is deleted (its claim, else its Sandbox, else the
/// pod itself) 300 ms from now, as a user's `kubectl delete` would; the garbage collector and
/// the pod's graceful delete do the rest.
pub(crate) fn vanish_later(cluster: &Arc<Cluster>, ns: &str, pod: &str) {
    let cluster = cluster.clone();
    let (ns, pod) = (ns.to_owned(), pod.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (res, name) = cluster.top_owner(&ns, &pod);
        let _ = cluster.delete(res, &ns, &name, &crate::api::DeleteOptions::default());
        cluster.kick();
    });
}

/// Serves one `pods/exec` request.
pub async fn serve(
    cluster: Arc<Cluster>,
    ns: &str,
    name: &str,
    q: &[(String, String)],
    mut request: Request,
) -> Response {
    let in_stream = match take_fault(&cluster, request.extensions().get().cloned()).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let Some(pod) = cluster.store.get(&PODS, ns, name) else {
        return status::not_found(&PODS, name).into_response();
    };
    let names: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect();
    let container = match param(q, "container") {
        Some(c) if !c.is_empty() => {
            if !names.iter().any(|n| n == c) {
                return status::bad_request(format!("container {c} is not valid for pod {name}"))
                    .into_response();
            }
            c.to_owned()
        }
        _ if names.len() == 1 => names[0].clone(),
        _ => {
            return status::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            ))
            .into_response();
        }
    };
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return status::bad_request(format!("pod {name} does not have a host assigned"))
            .into_response();
    }
    let (stdin, stdout, tty) = (flag(q, "stdin"), flag(q, "stdout"), flag(q, "tty"));
    // A terminal has no separate stderr (kubelet `NewOptions`: "bypassing stderr").
    let stderr = flag(q, "stderr") && !tty;
    if !(stdin || stdout || stderr) {
        return status::bad_request("you must specify at least 1 of stdin, stdout, stderr")
            .into_response();
    }
    let argv: Vec<String> = q
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    if argv.is_empty() {
        return status::bad_request("you must specify at least one command for the container")
            .into_response();
    }
    let served = cluster.exec_protocols();
    let (protocol, on_upgrade, answer) = match handshake(&mut request, &served) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let run = cluster.pod(ns, name);
    let exec = Exec {
        cluster: cluster.clone(),
        ns: ns.to_owned(),
        pod: name.to_owned(),
        run,
        container,
        argv,
        stdin,
        stdout,
        stderr,
        tty,
        v5: protocol == "v5.channel.k8s.io",
        fault: in_stream,
    };
    tokio::spawn(async move {
        if let Some(ws) = upgraded(on_upgrade).await {
            exec.run(ws).await;
        }
    });
    answer
}

/// The WebSocket handshake as the apiserver's `wsstream` answers it (`conn.go handshake`): an
/// upgrade is required (400), the first of the client's offered protocols that `served` names is
/// chosen and named in the answer (none: a bare 403, x/net/websocket's handshake failure),
/// `Sec-WebSocket-Key` is required. Returns the protocol, the upgrade and the `101` answer.
pub(crate) fn handshake(
    request: &mut Request,
    served: &[&str],
) -> Result<(String, hyper::upgrade::OnUpgrade, Response), Response> {
    let upgrade = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        return Err(status::bad_request("Upgrade request required").into_response());
    }
    let offered: Vec<String> = request
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let Some(protocol) = offered
        .iter()
        .find(|o| served.contains(&o.as_str()))
        .cloned()
    else {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::FORBIDDEN;
        return Err(r);
    };
    let Some(key) = request.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return Err(status::bad_request("missing Sec-WebSocket-Key").into_response());
    };
    let on_upgrade = hyper::upgrade::on(request);
    let r = execseam_emulator_kit::ws::switching_protocols(key.as_bytes(), Some(&protocol));
    Ok((protocol, on_upgrade, r))
}

/// The server side of an accepted upgrade (16 MiB messages at most).
pub(crate) async fn upgraded(on_upgrade: hyper::upgrade::OnUpgrade) -> Option<Ws> {
    let upgraded = on_upgrade.await.ok()?;
    Some(
        tokio_websockets::ServerBuilder::new()
            .limits(Limits::default().max_payload_len(Some(16 << 20)))
            .serve(TokioIo::new(upgraded)),
    )
}

struct Exec {
    cluster: Arc<Cluster>,
    ns: String,
    pod: String,
    run: Option<Arc<PodRun>>,
    container: String,
    argv: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    v5: bool,
    fault: Option<InStream>,
}

/// The exec's end as the status channel reports it.
enum End {
    Exit(i32),
    /// The runtime failed: `InternalError`.
    Internal(String),
}

fn status_of(end: &End, v5: bool, argv: &[String]) -> Value {
    match end {
        End::Exit(0) => json!({"metadata": {}, "status": "Success"}),
        End::Exit(code) => {
            // The translator wraps the kubelet's v4 text (client-go `errorDecoderV4`); the
            // kubelet itself writes its own.
            let message = if v5 {
                format!(
                    "command terminated with non-zero exit code: command terminated with exit code {code}"
                )
            } else {
                format!(
                    "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                    argv.join(" ")
                )
            };
            json!({"metadata": {}, "status": "Failure", "message": message,
                   "reason": "NonZeroExitCode",
                   "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
        }
        End::Internal(m) => json!({"metadata": {}, "status": "Failure",
                                   "message": format!("Internal error occurred: {m}"),
                                   "reason": "InternalError",
                                   "details": {"causes": [{"message": m}]}, "code": 500}),
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut f = Vec::with_capacity(data.len() + 1);
    f.push(channel);
    f.extend_from_slice(data);
    Message::binary(f)
}

impl Exec {
    async fn run(self, ws: Ws) {
        let (mut tx, mut rx) = ws.split();
        // The first message: empty, on the lowest writable channel (util/proxy/websocket.go).
        let first = if self.stdout {
            1
        } else if self.stderr {
            2
        } else {
            3
        };
        let _ = tx.send(Message::binary(vec![first])).await;
        let container = self
            .run
            .as_ref()
            .and_then(|r| r.container(Some(&self.container)).cloned());
        let (Some(run), Some(container)) = (self.run.clone(), container) else {
            let end = End::Internal(format!(
                "error executing command in container: container not found (\"{}\")",
                self.container
            ));
            let _ = tx
                .send(frame(
                    3,
                    status_of(&end, self.v5, &self.argv).to_string().as_bytes(),
                ))
                .await;
            let _ = tx.close().await;
            return;
        };
        let end = if self.tty {
            self.run_tty(&run, &container, &mut tx, &mut rx).await
        } else {
            self.run_pipes(&run, &container, &mut tx, &mut rx).await
        };
        match (self.fault, end) {
            (Some(InStream::Cut), _) => {}
            (Some(InStream::Malformed), _) => {
                let _ = tx.send(frame(3, b"{\"metadata\":{},\"status\":")).await;
            }
            (Some(InStream::Internal), _) => {
                let end = End::Internal("error executing command in container: failed to exec in container: the runtime failed after the command started".into());
                let _ = tx
                    .send(frame(
                        3,
                        status_of(&end, self.v5, &self.argv).to_string().as_bytes(),
                    ))
                    .await;
            }
            (_, end) => {
                let _ = tx
                    .send(frame(
                        3,
                        status_of(&end, self.v5, &self.argv).to_string().as_bytes(),
                    ))
                    .await;
            }
        }
        let _ = tx.close().await;
    }

    fn command(&self, container: &ContainerRun, extra: &[(&str, &str)]) -> tokio::process::Command {
        let mut env: BTreeMap<String, String> = container.env.clone();
        let user = &container.user;
        env.entry("HOME".into())
            .or_insert_with(|| user.home.clone());
        for (k, v) in extra {
            env.insert((*k).into(), (*v).into());
        }
        let mut cmd = tokio::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]).env_clear().envs(env);
        cmd
    }

    /// The runtime's refusal of a command it cannot start (containerd's text).
    fn start_failure(&self, e: &execseam_spawn::SpawnError) -> End {
        let prefix = "error executing command in container: failed to exec in container: failed to start exec";
        match e {
            execseam_spawn::SpawnError::Workdir(w) => End::Internal(format!(
                "{prefix}: OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"{}\") set in config.json failed: no such file or directory: {w}: unknown",
                self.argv[0]
            )),
            execseam_spawn::SpawnError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                End::Internal(format!(
                    "{prefix}: OCI runtime exec failed: exec failed: unable to start container process: exec: \"{}\": executable file not found in $PATH: unknown",
                    self.argv[0]
                ))
            }
            execseam_spawn::SpawnError::Io(io)
                if io.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                End::Internal(format!(
                    "{prefix}: OCI runtime exec failed: exec failed: unable to start container process: exec: \"{}\": permission denied: unknown",
                    self.argv[0]
                ))
            }
            execseam_spawn::SpawnError::Io(io) => End::Internal(format!("{prefix}: {io}")),
        }
    }

    fn vanish_later(&self) {
        if self.fault == Some(InStream::Vanish) {
            vanish_later(&self.cluster, &self.ns, &self.pod);
        }
    }

    async fn run_pipes(
        &self,
        run: &PodRun,
        container: &ContainerRun,
        tx: &mut futures_util::stream::SplitSink<Ws, Message>,
        rx: &mut futures_util::stream::SplitStream<Ws>,
    ) -> End {
        let mut cmd = self.command(container, &[]);
        cmd.stdin(if self.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(if self.stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(if self.stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = match run
            .sandbox
            .spawn(cmd, &container.user, &container.workdir)
            .await
        {
            Ok(c) => c.child,
            Err(e) => return self.start_failure(&e),
        };
        self.vanish_later();
        let mut child_stdin = child.stdin.take();
        let (ftx, mut frx) = tokio::sync::mpsc::channel::<Message>(16);
        let mut readers = Vec::new();
        for (channel, reader) in [
            (
                1u8,
                child
                    .stdout
                    .take()
                    .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            ),
            (
                2u8,
                child
                    .stderr
                    .take()
                    .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            ),
        ] {
            let Some(mut reader) = reader else { continue };
            let ftx = ftx.clone();
            readers.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 32 << 10];
                loop {
                    match reader.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if ftx.send(frame(channel, &buf[..n])).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }));
        }
        drop(ftx);
        let mut client_open = true;
        let mut outputs_open = true;
        while outputs_open {
            tokio::select! {
                m = rx.next(), if client_open => match m {
                    Some(Ok(m)) if m.is_binary() || m.is_text() => {
                        let p: Bytes = m.into_payload().into();
                        match p.first() {
                            Some(0) => {
                                if let Some(w) = child_stdin.as_mut() && w.write_all(&p[1..]).await.is_err() {
                                    child_stdin = None;
                                }
                            }
                            // v5's close signal: exactly `[255, channel]`.
                            Some(255) if self.v5 && p.len() == 2 && p[1] == 0 => child_stdin = None,
                            _ => {}
                        }
                    }
                    Some(Ok(_)) => {}
                    // The client went away: its stdin ends, the command goes on.
                    _ => {
                        client_open = false;
                        child_stdin = None;
                    }
                },
                f = frx.recv() => match f {
                    Some(f) => {
                        let cut = self.fault == Some(InStream::Cut);
                        if tx.send(f).await.is_err() {
                            client_open = false;
                        }
                        if cut {
                            // The stream is cut after the first output; the command goes on.
                            outputs_open = false;
                        }
                    }
                    None => outputs_open = false,
                },
            }
        }
        drop(child_stdin);
        drop(frx);
        match child.wait().await {
            Ok(s) => End::Exit(exit_code(s)),
            Err(e) => End::Internal(format!("error executing command in container: {e}")),
        }
    }

    async fn run_tty(
        &self,
        run: &PodRun,
        container: &ContainerRun,
        tx: &mut futures_util::stream::SplitSink<Ws, Message>,
        rx: &mut futures_util::stream::SplitStream<Ws>,
    ) -> End {
        // containerd sets TERM=xterm for a terminal exec (`oci.WithEnv` in the CRI exec path).
        let cmd = self.command(container, &[("TERM", "xterm")]);
        let pty = match run
            .sandbox
            .spawn_pty(
                cmd,
                &container.user,
                &container.workdir,
                PtySize::new(24, 80),
            )
            .await
        {
            Ok(p) => p,
            Err(e) => return self.start_failure(&e),
        };
        self.vanish_later();
        let mut child = pty.child;
        let master = Arc::new(pty.master);
        let reader = master.clone();
        let (ftx, mut frx) = tokio::sync::mpsc::channel::<Message>(16);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if ftx.send(frame(1, &buf[..n])).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut client_open = true;
        let mut done = false;
        while !done {
            tokio::select! {
                m = rx.next(), if client_open => match m {
                    Some(Ok(m)) if m.is_binary() || m.is_text() => {
                        let p: Bytes = m.into_payload().into();
                        match p.first() {
                            Some(0) if self.stdin => { let _ = master.write_all(&p[1..]).await; }
                            Some(4) => {
                                // client-go's `TerminalSize{Width, Height uint16}`: a
                                // missing field is 0, and the kubelet skips a size with
                                // either below 1 (`pkg/kubelet/container/resize.go`,
                                // `HandleResizing`).
                                if let Ok(size) = serde_json::from_slice::<Value>(&p[1..]) {
                                    let dim = |k: &str| size[k].as_u64().and_then(|v| u16::try_from(v).ok()).unwrap_or(0);
                                    let (cols, rows) = (dim("Width"), dim("Height"));
                                    if cols >= 1 && rows >= 1 {
                                        let _ = master.resize(PtySize::new(rows, cols));
                                    }
                                }
                            }
                            // Closing a terminal's stdin: the line discipline's end of file.
                            Some(255) if self.v5 && p.len() == 2 && p[1] == 0 => { let _ = master.write_all(&[4]).await; }
                            _ => {}
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => client_open = false,
                },
                f = frx.recv() => match f {
                    Some(f) => { let _ = tx.send(f).await; }
                    None => done = true,
                },
                s = child.wait() => {
                    // Drain what the terminal still holds.
                    while let Ok(Some(f)) = tokio::time::timeout(Duration::from_millis(100), frx.recv()).await {
                        let _ = tx.send(f).await;
                    }
                    return match s {
                        Ok(s) => End::Exit(exit_code(s)),
                        Err(e) => End::Internal(format!("error executing command in container: {e}")),
                    };
                }
            }
        }
        match child.wait().await {
            Ok(s) => End::Exit(exit_code(s)),
            Err(e) => End::Internal(format!("error executing command in container: {e}")),
        }
    }
}

/// The code the runtime reports: the exit status, or 128 + the signal.
fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}
