//! The sandboxd fast path (`EXECSEAM_KUBERNETES_EXEC=sandboxd`): every command is a `Start` on
//! the `ProcessService` of agent-sandbox's `sandboxd` (`process.v1`, gRPC on port 9090 in the
//! pod), over a `pods/portforward` through the API server, as the agent-sandbox SDKs reach it
//! (`examples/sandboxd-sandbox/sandbox-template.yaml`: "The SDKs connect over a pod
//! port-forward").
//!
//! - The port-forward is `v4.channel.k8s.io` (kubelet `portforward/websocket.go`): channel 0 is
//!   the connection's bytes, channel 1 the kubelet's error text; each opens with the port (2
//!   bytes, little-endian). An error text means the port could not be reached: `Unavailable`.
//! - `Start` streams stdout and stderr apart (`StartResponse.stdout`/`stderr`) and ends with
//!   `ExitEvent`; a stream that ends without it is `Protocol` (`Unsafe`), never an exit.
//! - stdin: `WriteStdin` (32 KiB at a time), then `WriteStdin{eof}` (sandboxd keeps the pipe
//!   open until then). env: `ProcessConfig.env_vars` (merged over the daemon's environment).
//!   workdir: shell-wrapped (`cd`, the kit's wrapper), because sandboxd confines `cwd` to its
//!   root: an absolute `/tmp` becomes `/workspace/tmp` (`pathutil.SanitizePath`).
//! - sandboxd reports every signal death as `exit_code: -1` (Go's `ExitError.ExitCode()`): the
//!   signal is lost, so the adapter answers `Internal` (`Unsafe`), never `Exit::Code(-1)` and
//!   never a guessed signal.
//! - The host's deadline (the exec future dropped, or the stream's kill) is
//!   `SendSignal(SIGKILL)` to the process's group: a dropped `Start` stream alone makes sandboxd
//!   kill only the leader (`exec.CommandContext`; agent-sandbox#369).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, StderrGate, WrapOptions};
use execseam_adapter_kit::grpc::{self, Origin};
use execseam_adapter_kit::text::escape_path_segment;
use execseam_core::{Command, Error, ErrorKind, Event, EventStream, Exit, Output, Retry};
use execseam_kubernetes_proto as pb;
use futures_util::{SinkExt, StreamExt};
use pb::process_service_client::ProcessServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_websockets::Message;
use tonic::transport::{Channel, Endpoint};

use crate::channel::{self, Opened, Protocol};
use crate::client::adapter;
use crate::error::exec_refused;
use crate::exec::{Shared, Target};

/// sandboxd's gRPC port (its `--grpc-port` default).
pub const PORT: u16 = 9090;
/// The largest stdin chunk per `WriteStdin`.
const STDIN_CHUNK: usize = 32 << 10;

type Client = ProcessServiceClient<Channel>;

fn status_error(status: &tonic::Status, op: &'static str, started: bool) -> Error {
    let origin = grpc::origin(status, None);
    let (kind, retry) = match (origin, status.code()) {
        // A transport failure: the call may have reached sandboxd.
        (Origin::Connect, _) if !started => (ErrorKind::Unavailable, Retry::SAFE),
        (Origin::Connect | Origin::Transport | Origin::Timer, _) => {
            (ErrorKind::Unavailable, Retry::Unsafe)
        }
        (Origin::Decode, _) => (ErrorKind::Protocol, Retry::Unsafe),
        // sandboxd's own answers (`process.go`); before `InitEvent` nothing ran.
        (_, tonic::Code::InvalidArgument) => (ErrorKind::InvalidCommand, Retry::Never),
        (_, tonic::Code::NotFound) => (ErrorKind::NotFound, Retry::Never),
        (_, tonic::Code::PermissionDenied) => (ErrorKind::PermissionDenied, Retry::Never),
        (_, tonic::Code::Unimplemented) => (ErrorKind::Unsupported, Retry::Never),
        (_, tonic::Code::Unavailable) if !started => (ErrorKind::Unavailable, Retry::SAFE),
        _ if !started => (ErrorKind::Internal, Retry::Never),
        _ => (ErrorKind::Internal, Retry::Unsafe),
    };
    adapter(kind, retry, op, status.message().to_owned()).with_code(grpc::code_name(status.code()))
}

fn protocol(op: &'static str, retry: Retry, message: impl Into<String>) -> Error {
    adapter(ErrorKind::Protocol, retry, op, message)
}

/// A port-forward to the pod's sandboxd and a gRPC channel over it.
async fn connect(shared: &Shared, target: &Target) -> Result<Client, Error> {
    let op = "exec";
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}/portforward?ports={PORT}",
        escape_path_segment(&target.namespace),
        escape_path_segment(&target.pod)
    );
    let socket = match channel::open(&shared.api, &path, &[Protocol::V4], op).await? {
        Opened::Socket(s) => s,
        Opened::Refused(answer) => return Err(exec_refused(&answer, &target.pod)),
    };
    let (mut tx, mut rx) = socket.ws.split();
    let [lo, hi] = PORT.to_le_bytes();
    for channel in [0u8, 1] {
        match rx.next().await {
            Some(Ok(m)) if m.as_payload()[..] == [channel, lo, hi] => {}
            other => {
                return Err(protocol(
                    op,
                    Retry::SAFE,
                    format!(
                        "the port-forward's channel {channel} did not open with port {PORT}: {:?}",
                        other.map(|m| m.map(|m| m.as_payload().to_vec()))
                    ),
                ));
            }
        }
    }
    let refusal: Arc<Mutex<Option<String>>> = Arc::default();
    let (ours, theirs) = tokio::io::duplex(256 << 10);
    let (mut from_grpc, mut to_grpc) = tokio::io::split(theirs);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n @ 1..) = from_grpc.read(&mut buf).await {
            let mut frame = Vec::with_capacity(n + 1);
            frame.push(0);
            frame.extend_from_slice(&buf[..n]);
            if tx.send(Message::binary(frame)).await.is_err() {
                return;
            }
        }
        let _ = tx.close().await;
    });
    let refused = refusal.clone();
    tokio::spawn(async move {
        while let Some(Ok(m)) = rx.next().await {
            let p: Bytes = m.into_payload().into();
            match p.split_first() {
                Some((0, data)) if to_grpc.write_all(data).await.is_err() => return,
                Some((1, text)) => {
                    *refused.lock().expect("refusal") =
                        Some(String::from_utf8_lossy(text).into_owned());
                    return;
                }
                _ => {}
            }
        }
    });
    let io = Mutex::new(Some(ours));
    let grpc = Endpoint::from_static("http://sandboxd.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let io = io.lock().expect("io").take();
            async move {
                io.map(hyper_util::rt::TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("the port-forward carries one connection"))
            }
        }))
        .await;
    match grpc {
        Ok(channel) => Ok(ProcessServiceClient::new(channel)),
        Err(e) => {
            let why = refusal.lock().expect("refusal").clone();
            Err(adapter(
                ErrorKind::Unavailable,
                Retry::SAFE,
                op,
                why.unwrap_or_else(|| format!("no gRPC connection over the port-forward: {e}")),
            ))
        }
    }
}

/// A running `Start`.
struct Run {
    shared: Arc<Shared>,
    target: Target,
    stream: tonic::Streaming<pb::StartResponse>,
    wrap: Option<WrapOptions>,
    gate: StderrGate,
    kill: Arc<Mutex<Option<Killer>>>,
    pending: Option<Event>,
    done: bool,
}

/// Sends `SendSignal(SIGKILL)` to a started process's group.
struct Killer {
    client: Client,
    process_id: i32,
}

impl Killer {
    async fn kill(mut self) -> Result<(), Error> {
        let request = pb::SendSignalRequest {
            process_id: self.process_id,
            signal: pb::Signal::Sigkill.into(),
        };
        match self.client.send_signal(request).await {
            Ok(_) => Ok(()),
            // The process ended in between: nothing left to kill.
            Err(s)
                if s.code() == tonic::Code::NotFound && grpc::origin(&s, None) == Origin::Peer =>
            {
                Ok(())
            }
            Err(s) => Err(status_error(&s, "kill", true)),
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // A run dropped before its exit: the host's deadline. Kill the group.
        let killer = self.kill.lock().ok().and_then(|mut k| k.take());
        if let (Some(k), Ok(rt)) = (killer, tokio::runtime::Handle::try_current()) {
            rt.spawn(async move {
                let _ = k.kill().await;
            });
        }
    }
}

async fn start(shared: &Arc<Shared>, target: &Target, command: Command) -> Result<Run, Error> {
    let op = "exec";
    let opts = WrapOptions {
        workdir: true,
        ..WrapOptions::default()
    };
    let argv = if command.workdir().is_some() {
        degrade::wrap(&command, &opts)?
    } else {
        command.argv().to_vec()
    };
    let wrap = command.workdir().is_some().then_some(opts);
    let gate = wrap.as_ref().map_or_else(StderrGate::open, StderrGate::new);
    let mut client = connect(shared, target).await?;
    let request = pb::StartRequest {
        config: Some(pb::ProcessConfig {
            command: argv,
            env_vars: command
                .env()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cwd: None,
        }),
        pty: None,
    };
    let mut stream = client
        .start(request)
        .await
        .map_err(|s| status_error(&s, op, false))?
        .into_inner();
    let process_id = match stream.message().await {
        Ok(Some(pb::StartResponse {
            event: Some(pb::start_response::Event::Init(init)),
        })) => init.process_id,
        Ok(other) => {
            return Err(protocol(
                op,
                Retry::Unsafe,
                format!("the Start stream did not open with an InitEvent: {other:?}"),
            ));
        }
        Err(s) => return Err(status_error(&s, op, false)),
    };
    let kill = Arc::new(Mutex::new(Some(Killer {
        client: client.clone(),
        process_id,
    })));
    // stdin, then its end, beside the output (a command may fill its pipes before reading).
    let stdin = command.stdin().clone();
    tokio::spawn(async move {
        let mut chunks: Vec<Bytes> = (0..stdin.len())
            .step_by(STDIN_CHUNK)
            .map(|i| stdin.slice(i..(i + STDIN_CHUNK).min(stdin.len())))
            .collect();
        chunks.push(Bytes::new());
        for chunk in chunks {
            let payload = if chunk.is_empty() {
                pb::write_stdin_request::Payload::Eof(pb::google::protobuf::Empty {})
            } else {
                pb::write_stdin_request::Payload::Input(chunk)
            };
            let request = pb::WriteStdinRequest {
                process_id,
                payload: Some(payload),
            };
            // A command that exits without reading its stdin: sandboxd answers NOT_FOUND.
            if client.write_stdin(request).await.is_err() {
                return;
            }
        }
    });
    Ok(Run {
        shared: shared.clone(),
        target: target.clone(),
        stream,
        wrap,
        gate,
        kill,
        pending: None,
        done: false,
    })
}

impl crate::exec::Events for Run {
    fn next_event(&mut self) -> impl Future<Output = Result<Event, Error>> + Send {
        Run::next_event(self)
    }

    fn done(&self) -> bool {
        self.done
    }
}

impl Run {
    async fn next_event(&mut self) -> Result<Event, Error> {
        let op = "exec";
        if let Some(e) = self.pending.take() {
            self.done = matches!(e, Event::Exit(_));
            return Ok(e);
        }
        loop {
            let message = self
                .stream
                .message()
                .await
                .map_err(|s| status_error(&s, op, true))?;
            let Some(message) = message else {
                return Err(protocol(
                    op,
                    Retry::Unsafe,
                    "the Start stream ended without an ExitEvent",
                ));
            };
            match message.event {
                Some(pb::start_response::Event::Stdout(b)) if !b.is_empty() => {
                    return Ok(Event::Stdout(b));
                }
                Some(pb::start_response::Event::Stderr(b)) => {
                    if let Some(b) = self.gate.push(b) {
                        return Ok(Event::Stderr(b));
                    }
                }
                Some(pb::start_response::Event::Exit(e)) => {
                    // The exit is seen: nothing to kill any more.
                    self.kill.lock().ok().and_then(|mut k| k.take());
                    if e.exit_code < 0 {
                        if crate::exec::pod_state(&self.shared, &self.target).await {
                            return Err(adapter(
                                ErrorKind::NotFound,
                                Retry::Unsafe,
                                op,
                                format!(
                                    "pod {} was deleted while the command ran (sandboxd reported exit_code {})",
                                    self.target.pod, e.exit_code
                                ),
                            ));
                        }
                        return Err(adapter(
                            ErrorKind::Internal,
                            Retry::Unsafe,
                            op,
                            format!(
                                "sandboxd reported exit_code {}: the command was killed by a signal sandboxd does not name (Go's ExitError.ExitCode())",
                                e.exit_code
                            ),
                        ));
                    }
                    let exit = Exit::Code(e.exit_code);
                    let held = self.gate.finish(exit);
                    let out = match &self.wrap {
                        Some(w) => w
                            .check(held)
                            .map_err(|e| e.with_provider(crate::PROVIDER))?,
                        None => held,
                    };
                    if out.stderr.is_empty() {
                        self.done = true;
                        return Ok(Event::Exit(exit));
                    }
                    self.pending = Some(Event::Exit(exit));
                    return Ok(Event::Stderr(out.stderr));
                }
                Some(_) => {}
                None => {
                    return Err(protocol(
                        op,
                        Retry::Unsafe,
                        "a StartResponse without an event",
                    ));
                }
            }
        }
    }
}

/// Runs `command` to its exit.
pub(crate) async fn run(
    shared: &Arc<Shared>,
    target: &Target,
    command: Command,
) -> Result<Output, Error> {
    stream(shared, target, command).await?.collect().await
}

/// Streams `command`; the stream's kill is `SendSignal(SIGKILL)` to its group.
pub(crate) async fn stream(
    shared: &Arc<Shared>,
    target: &Target,
    command: Command,
) -> Result<EventStream, Error> {
    let run = start(shared, target, command).await?;
    let kill = run.kill.clone();
    let stream = crate::exec::event_stream(run);
    Ok(stream.with_kill(move || async move {
        let k = kill.lock().ok().and_then(|mut k| k.take());
        match k {
            Some(k) => k.kill().await,
            None => Ok(()),
        }
    }))
}
