#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Emulator of the agent-substrate guest services (`ateenv.v1alpha`, the version google/ax
//! pins): `ProcessService` and `FileSystemService` over plain-text gRPC (h2c) on loopback, with
//! the server behaviour of agent-substrate/env's guest (see [`tracker`] and [`files`]), plus
//! `/healthz` and `/readyz` on the same port as AX's runner serves them.
//!
//! # Guests and routing
//!
//! One emulator is one guest reached directly (AX's `ax ssh` path, no routing header) and also a
//! minimal Substrate router: a request carrying `ate-target-actor: <atespace>/<actor>` goes to
//! that guest ([`AxEmulator::add_guest`] adds more, each its own sandbox); an unknown actor is
//! `NOT_FOUND "target actor … not found"` (the router's own answer is not published: inferred).
//!
//! # Faults
//!
//! Route `exec` (`StartProcess`) renders the nine standard faults:
//!
//! | fault | rendering |
//! |---|---|
//! | `429[:s]` | `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms: s*1000`; nothing starts |
//! | `500` | the process starts, then `INTERNAL` |
//! | `503` | `UNAVAILABLE`; nothing starts |
//! | `reset` | the process starts, then the TCP connection is reset (no response) |
//! | `cut` | the process starts; every output stream of it is cut before the exit message (the HTTP/2 body ends without gRPC trailers) |
//! | `malformed` | the process starts; the response message is not valid protobuf |
//! | `latency:<ms>` | the answer is delayed |
//! | `auth` | `UNAUTHENTICATED`; nothing starts |
//! | `vanish` | the process starts; 300 ms later the guest is destroyed (processes killed, streams reset, actor unknown) |
//!
//! Route `stream` (each `StreamProcessOutput` call) adds the guest's own failure modes, each for
//! one stream: `reset` resets the connection right after the first output message (a stream
//! reset in the middle of output), `cut` ends the stream with OK before the exit message (the
//! documented "ends without exit" shape), `503` is `UNAVAILABLE`, `malformed` a bad message.
//! Route `get` (`GetProcess`) takes the status faults (`503`, `500`, `auth`, `429`).
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

pub mod files;
#[cfg(test)]
mod tests;
pub mod tracker;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use execseam_ax_proto::file_system_service_server::FileSystemServiceServer;
use execseam_ax_proto::google::protobuf::Timestamp;
use execseam_ax_proto::process_service_server::{ProcessService, ProcessServiceServer};
use execseam_ax_proto::{
    GetProcessRequest, Process, ProcessOutput, ProcessState, Signal, SignalProcessRequest,
    StartProcessRequest, StreamProcessOutputRequest, WriteProcessInputRequest,
    WriteProcessInputResponse, process_output,
};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use axum::Router;
use execseam_emulator_kit::grpc::{BodyFault, body_faults};
use execseam_emulator_kit::{
    ConnControl, Dir, Emulator, FAULT_NAMES, Fault, FaultHandle, Provider, Rendered, Sandbox,
    SandboxEntry, SandboxSpec, Sandboxing, Shell, User,
};
use tracker::{Limits, Proc, StartOptions, Tracker, TrackerError};

/// The gRPC metadata key the Substrate router routes on: `<atespace>/<actor>`.
pub const TARGET_ACTOR_HEADER: &str = "ate-target-actor";

/// The fault routes and what each renders (`--fault ROUTE=FAULT`): every fault on `exec` (`StartProcess`); statuses on `get`; every fault on `stream` (`StreamProcessOutput`: a reset or a cut mid-output, a malformed frame).
const FAULTS: Rendered = &[
    ("exec", FAULT_NAMES),
    ("get", &["429", "503", "auth", "500"]),
    ("input", &["429", "503", "reset"]),
    ("stream", FAULT_NAMES),
];

/// The guest's workspace: default cwd and the files root.
pub const WORKSPACE: &str = "/workspace";
/// The actor name of the emulator's first guest.
pub const PRIMARY_ACTOR: &str = "execseam/guest-0";

/// A server-streaming body fed by a channel.
pub struct Channel<T>(mpsc::Receiver<Result<T, Status>>);

impl<T> futures_core::Stream for Channel<T> {
    type Item = Result<T, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// One guest: a sandbox and its process tracker.
pub struct GuestState {
    actor: String,
    tracker: Arc<Tracker>,
    alive: AtomicBool,
    streams: Mutex<Vec<ConnControl>>,
}

execseam_emulator_kit::debug_fields!(GuestState: actor);

impl GuestState {
    /// Its actor name (`<atespace>/<actor>`).
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Its sandbox (files at the guest's paths through `sandbox().fs(…)`).
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        self.tracker.sandbox()
    }

    /// Processes still running.
    pub fn running(&self) -> usize {
        self.tracker.running().len()
    }

    /// A process by id, for tests (`None` once forgotten).
    pub fn process(&self, id: &str) -> Option<Arc<Proc>> {
        self.tracker.get(id).ok()
    }

    /// True until it vanished.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Destroys the guest: kills every process group, resets its open output streams, removes
    /// its files. Idempotent.
    pub fn vanish(&self) {
        if !self.alive.swap(false, Ordering::SeqCst) {
            return;
        }
        // The streams break first: a process's exit read after the kill below must not reach a
        // client as the command's own end (exit 137) when its guest vanished.
        for ctl in self.streams.lock().expect("streams").drain(..) {
            ctl.reset();
        }
        for p in self.tracker.running() {
            tracker::kill_group_now(p.host_pid, 9);
        }
        self.tracker.sandbox().destroy();
    }
}

impl Drop for GuestState {
    fn drop(&mut self) {
        for p in self.tracker.running() {
            tracker::kill_group_now(p.host_pid, 9);
        }
    }
}

/// A guest counts while it is alive; destroying it is [`GuestState::vanish`].
impl SandboxEntry for GuestState {
    fn is_live(&self) -> bool {
        self.is_alive()
    }

    fn teardown(&self) {
        self.vanish();
    }
}

/// State shared by the services.
pub(crate) struct Shared {
    shell: Arc<Shell<Ax>>,
    primary: Arc<GuestState>,
    faults: FaultHandle,
    limits: Limits,
    pub(crate) files_root: String,
    pub(crate) confine_files: bool,
}

impl Shared {
    fn new_guest(&self, actor: &str) -> std::io::Result<Arc<GuestState>> {
        make_guest(actor, self.shell.sandboxing(), self.limits.clone())
    }

    /// The guest a request is for: `ate-target-actor`, or the directly reached guest.
    pub(crate) fn route<T>(&self, request: &Request<T>) -> Result<Arc<GuestState>, Status> {
        match request.metadata().get(TARGET_ACTOR_HEADER) {
            Some(v) => {
                let actor = v
                    .to_str()
                    .map_err(|_| Status::invalid_argument("ate-target-actor is not ASCII"))?;
                self.shell
                    .sandboxes()
                    .get(actor)
                    .filter(|g| g.is_alive())
                    .ok_or_else(|| Status::not_found(format!("target actor {actor:?} not found")))
            }
            None if self.primary.is_alive() => Ok(self.primary.clone()),
            None => Err(Status::unavailable("the guest is gone")),
        }
    }
}

fn make_guest(
    actor: &str,
    sandboxing: &Sandboxing,
    limits: Limits,
) -> std::io::Result<Arc<GuestState>> {
    let env = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("WORKSPACE", WORKSPACE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect::<std::collections::BTreeMap<String, String>>();
    // The guest runs its tools as root in its workspace; its hostname is not documented.
    let spec = SandboxSpec::new("ax", "localhost", User::root(), env).dirs([Dir::root(WORKSPACE)]);
    let sandbox = Sandbox::create(actor, spec, sandboxing)?;
    let workspace = sandbox.visible_path(WORKSPACE);
    let _ = workspace; // the tracker resolves paths in the guest's view and maps them itself
    Ok(Arc::new(GuestState {
        actor: actor.to_owned(),
        tracker: Arc::new(Tracker::new(sandbox, WORKSPACE, limits)),
        alive: AtomicBool::new(true),
        streams: Mutex::new(Vec::new()),
    }))
}

fn status_fault(fault: Fault) -> Option<Status> {
    match fault {
        Fault::RateLimited { retry_after_secs } => {
            let mut s = Status::resource_exhausted("emulated fault: rate limited");
            if let Ok(v) = (retry_after_secs * 1000).to_string().parse() {
                s.metadata_mut().insert("grpc-retry-pushback-ms", v);
            }
            Some(s)
        }
        Fault::Unavailable => Some(Status::unavailable(
            "emulated fault: the guest is unavailable",
        )),
        Fault::AuthFailure => Some(Status::unauthenticated(
            "emulated fault: the credentials were rejected",
        )),
        _ => None,
    }
}

fn rpc_error(e: TrackerError, id: &str) -> Status {
    match e {
        TrackerError::NotFound => Status::not_found(format!("process {id:?} not found")),
        TrackerError::Exited => Status::failed_precondition(format!("process {id:?} has exited")),
        TrackerError::NoStdin => {
            Status::failed_precondition(format!("process {id:?} was started without stdin"))
        }
        TrackerError::StdinClosed => {
            Status::failed_precondition(format!("stdin of process {id:?} is closed"))
        }
        TrackerError::TooMany(n) => Status::resource_exhausted(format!(
            "maximum concurrent processes limit reached ({n}); wait for running processes to exit or signal them"
        )),
        TrackerError::Other(m) => Status::internal(m),
    }
}

fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// ProcessState.ToProto.
pub fn to_proto(p: &Proc) -> Process {
    let ended = p.ended();
    Process {
        process_id: p.id.clone(),
        command: p.command.clone(),
        pid: p.pid,
        state: if ended.is_some() {
            ProcessState::Exited as i32
        } else {
            ProcessState::Running as i32
        },
        exit_code: match ended {
            Some(e) if e.signal != 0 => 128 + e.signal,
            Some(e) => e.code,
            None => 0,
        },
        started_at: Some(timestamp(p.started_at)),
        finished_at: ended.map(|e| timestamp(e.at)),
    }
}

fn lookup(guest: &GuestState, id: &str) -> Result<Arc<Proc>, Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument("process_id cannot be empty"));
    }
    guest.tracker.get(id).map_err(|e| rpc_error(e, id))
}

struct Processes {
    shared: Arc<Shared>,
}

#[tonic::async_trait]
impl ProcessService for Processes {
    async fn start_process(
        &self,
        request: Request<StartProcessRequest>,
    ) -> Result<Response<Process>, Status> {
        let fault = self.shared.faults.take("exec");
        if let Some(s) = fault.and_then(status_fault) {
            return Err(s);
        }
        if let Some(Fault::Latency(d)) = fault {
            tokio::time::sleep(d).await;
        }
        let ctl = request.extensions().get::<ConnControl>().cloned();
        let guest = self.shared.route(&request)?;
        let req = request.into_inner();
        if req.command.is_empty() {
            return Err(Status::invalid_argument("command cannot be empty"));
        }
        let timeout = match &req.timeout {
            None => Duration::ZERO,
            Some(d) => {
                let valid = d.seconds >= 0
                    && (0..1_000_000_000).contains(&d.nanos)
                    && d.seconds <= 315_576_000_000;
                if !valid {
                    return Err(Status::invalid_argument("timeout is invalid"));
                }
                Duration::new(d.seconds as u64, d.nanos as u32)
            }
        };
        let proc = guest
            .tracker
            .start(StartOptions {
                command: req.command,
                cwd: req.cwd,
                env: req.env,
                stdin: req.stdin,
                timeout,
            })
            .await
            .map_err(|e| rpc_error(e, ""))?;
        let mut response = Response::new(to_proto(&proc));
        match fault {
            Some(Fault::ServerError) => {
                return Err(Status::internal(
                    "emulated fault: internal error after the process started",
                ));
            }
            Some(Fault::ResetBeforeResponse) => {
                return execseam_emulator_kit::reset_connection(ctl.as_ref()).await;
            }
            Some(Fault::CutBeforeExit) => proc.cut.store(true, Ordering::SeqCst),
            Some(Fault::MalformedBody) => {
                response.extensions_mut().insert(BodyFault::Malformed);
            }
            Some(Fault::SandboxVanishes) => {
                let guest = guest.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    guest.vanish();
                });
            }
            _ => {}
        }
        Ok(response)
    }

    async fn get_process(
        &self,
        request: Request<GetProcessRequest>,
    ) -> Result<Response<Process>, Status> {
        let fault = self.shared.faults.take("get");
        if let Some(s) = fault.and_then(status_fault) {
            return Err(s);
        }
        if fault == Some(Fault::ServerError) {
            return Err(Status::internal("emulated fault: internal error"));
        }
        let guest = self.shared.route(&request)?;
        let proc = lookup(&guest, &request.get_ref().process_id)?;
        Ok(Response::new(to_proto(&proc)))
    }

    type StreamProcessOutputStream = Pin<Box<Channel<ProcessOutput>>>;

    async fn stream_process_output(
        &self,
        request: Request<StreamProcessOutputRequest>,
    ) -> Result<Response<Self::StreamProcessOutputStream>, Status> {
        let fault = self.shared.faults.take("stream");
        if let Some(s) = fault.and_then(status_fault) {
            return Err(s);
        }
        match fault {
            Some(Fault::ServerError) => {
                return Err(Status::internal("emulated fault: internal error"));
            }
            Some(Fault::Latency(d)) => tokio::time::sleep(d).await,
            Some(Fault::SandboxVanishes) => {
                let guest = self.shared.route(&request)?;
                guest.vanish();
                return Err(Status::unavailable("the guest is gone"));
            }
            _ => {}
        }
        let ctl = request.extensions().get::<ConnControl>().cloned();
        let guest = self.shared.route(&request)?;
        let req = request.into_inner();
        let proc = lookup(&guest, &req.process_id)?;
        if req.stdout_offset < 0 || req.stderr_offset < 0 {
            return Err(Status::invalid_argument("offsets cannot be negative"));
        }
        if let Some(ctl) = &ctl {
            let mut streams = guest.streams.lock().expect("streams");
            streams.push(ctl.clone());
            if streams.len() > 64 {
                streams.remove(0);
            }
        }
        let (tx, rx) = mpsc::channel(4);
        let cut = proc.cut.load(Ordering::SeqCst);
        tokio::spawn(follow(
            guest.clone(),
            proc,
            [req.stdout_offset, req.stderr_offset],
            req.follow,
            tx,
            fault,
            ctl,
        ));
        let mut response = Response::new(Box::pin(Channel(rx)));
        if cut {
            response.extensions_mut().insert(BodyFault::StripTrailers);
        }
        if fault == Some(Fault::MalformedBody) {
            response.extensions_mut().insert(BodyFault::Malformed);
        }
        Ok(response)
    }

    async fn write_process_input(
        &self,
        request: Request<Streaming<WriteProcessInputRequest>>,
    ) -> Result<Response<WriteProcessInputResponse>, Status> {
        let fault = self.shared.faults.take("input");
        if let Some(s) = fault.and_then(status_fault) {
            return Err(s);
        }
        let ctl = request.extensions().get::<ConnControl>().cloned();
        let guest = self.shared.route(&request)?;
        let mut stream = request.into_inner();
        let mut proc: Option<(Arc<Proc>, String)> = None;
        let mut total: i64 = 0;
        while let Some(m) = stream.message().await? {
            if proc.is_none() {
                if m.process_id.is_empty() {
                    return Err(Status::invalid_argument(
                        "process_id is required on the first message",
                    ));
                }
                let p = guest
                    .tracker
                    .get(&m.process_id)
                    .map_err(|e| rpc_error(e, &m.process_id))?;
                proc = Some((p, m.process_id.clone()));
            }
            let (p, id) = proc.as_ref().expect("set above");
            if !m.data.is_empty() {
                let n = p.write_input(&m.data).await.map_err(|e| rpc_error(e, id))?;
                total += n as i64;
            }
            if m.close {
                p.close_input().await.map_err(|e| rpc_error(e, id))?;
            }
        }
        if proc.is_none() {
            return Err(Status::invalid_argument(
                "process_id is required on the first message",
            ));
        }
        // The bytes were written; the answer is lost on the way.
        if fault == Some(Fault::ResetBeforeResponse) {
            return execseam_emulator_kit::reset_connection(ctl.as_ref()).await;
        }
        Ok(Response::new(WriteProcessInputResponse {
            bytes_written: total,
        }))
    }

    async fn signal_process(
        &self,
        request: Request<SignalProcessRequest>,
    ) -> Result<Response<Process>, Status> {
        let guest = self.shared.route(&request)?;
        let req = request.into_inner();
        let proc = lookup(&guest, &req.process_id)?;
        let sig = match Signal::try_from(req.signal) {
            Ok(Signal::Unspecified) | Err(_) => {
                let name = Signal::try_from(req.signal)
                    .map(|s| s.as_str_name().to_owned())
                    .unwrap_or_else(|_| req.signal.to_string());
                return Err(Status::invalid_argument(format!(
                    "unsupported signal {name}"
                )));
            }
            Ok(s) => s as i32,
        };
        if proc.ended().is_some() || !tracker::kill_group(proc.host_pid, sig).await {
            return Err(rpc_error(TrackerError::Exited, &req.process_id));
        }
        Ok(Response::new(to_proto(&proc)))
    }
}

/// The StreamProcessOutput loop: deltas of stdout then stderr, the exit message once the process
/// exited and everything was sent; with `follow`, waits for changes.
/// The most output bytes one `ProcessOutput` message carries: the guest drains a delta "in
/// bounded chunks" of `logChunkBytes int64 = 1 << 20`, "keeping every message comfortably under
/// gRPC's default 4 MiB receive ceiling" (agent-substrate/env `guest/process/service.go`@859629af,
/// StreamProcessLogs). A client with gRPC's default limits (AX's `grpc.NewClient`) reads any
/// amount of output.
pub const OUTPUT_CHUNK: usize = 1 << 20;

async fn follow(
    guest: Arc<GuestState>,
    proc: Arc<Proc>,
    mut offsets: [i64; 2],
    follow: bool,
    tx: mpsc::Sender<Result<ProcessOutput, Status>>,
    fault: Option<Fault>,
    ctl: Option<ConnControl>,
) {
    let mut changes = proc.subscribe();
    let cut = proc.cut.load(Ordering::SeqCst) || fault == Some(Fault::CutBeforeExit);
    let reset = fault == Some(Fault::ResetBeforeResponse);
    let reset_now = |ctl: &Option<ConnControl>| {
        if let Some(c) = ctl {
            c.reset();
        }
    };
    loop {
        changes.borrow_and_update();
        let exited = proc.ended().is_some();
        for _ in 0..if exited { 2 } else { 1 } {
            for (i, offset) in offsets.iter_mut().enumerate() {
                let (data, next) = proc.read(i, *offset);
                *offset = next;
                // A delta goes out as several messages of at most OUTPUT_CHUNK bytes each.
                for start in (0..data.len()).step_by(OUTPUT_CHUNK) {
                    let piece = data.slice(start..data.len().min(start + OUTPUT_CHUNK));
                    let output = if i == 0 {
                        process_output::Output::Stdout(piece)
                    } else {
                        process_output::Output::Stderr(piece)
                    };
                    if tx
                        .send(Ok(ProcessOutput {
                            output: Some(output),
                        }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    if reset {
                        // A stream reset in the middle of output.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        reset_now(&ctl);
                        return;
                    }
                }
            }
        }
        if exited {
            if cut {
                return;
            }
            if reset {
                reset_now(&ctl);
                return;
            }
            // A guest that vanished reports nothing more: its processes died with it (the kill in
            // `vanish` records exit 137), and no exit may reach a client as the command's own end.
            // `vanish` resets the streams it knows first; this closes the race with a stream whose
            // reset has not landed yet under load.
            if !guest.is_alive() {
                let _ = tx.send(Err(Status::unavailable("the guest is gone"))).await;
                return;
            }
            let _ = tx
                .send(Ok(ProcessOutput {
                    output: Some(process_output::Output::Exit(to_proto(&proc))),
                }))
                .await;
            return;
        }
        if !follow || fault == Some(Fault::CutBeforeExit) {
            return;
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            () = tx.closed() => return,
        }
    }
}

/// The agent-substrate guest services emulator ([`Provider`]); its typed test accessors are
/// reached through [`AxEmulator`] (`Deref`).
pub struct Ax {
    shared: Arc<Shared>,
}

/// A running emulator.
pub type AxEmulator = Emulator<Ax>;

impl Provider for Ax {
    const NAME: &'static str = "ax";
    /// Every fault on `exec` (`StartProcess`) and `stream` (`StreamProcessOutput`: a reset or a
    /// cut mid-output, a malformed frame); statuses on `get`.
    const FAULTS: Rendered = FAULTS;
    /// The guest services take no credential.
    const PLACEHOLDER_TOKEN: &'static str = "";
    const SCRATCH: &'static str = "/workspace/conformance";
    type Options = ();
    /// The guests, by actor name.
    type Sandbox = GuestState;
    type Key = String;

    /// One guest, [`PRIMARY_ACTOR`], exists from the start.
    async fn start(shell: Arc<Shell<Ax>>, (): ()) -> std::io::Result<(Ax, Router)> {
        let limits = Limits::default();
        let primary = make_guest(PRIMARY_ACTOR, shell.sandboxing(), limits.clone())?;
        shell
            .sandboxes()
            .insert(PRIMARY_ACTOR.to_owned(), primary.clone());
        let shared = Arc::new(Shared {
            faults: shell.faults().clone(),
            shell,
            primary,
            limits,
            files_root: WORKSPACE.to_owned(),
            confine_files: true,
        });
        const MAX: usize = 64 * 1024 * 1024;
        let processes = ProcessServiceServer::new(Processes {
            shared: shared.clone(),
        })
        .max_decoding_message_size(MAX)
        .max_encoding_message_size(MAX);
        let files = FileSystemServiceServer::new(files::Files {
            shared: shared.clone(),
        })
        .max_decoding_message_size(MAX)
        .max_encoding_message_size(MAX);
        let router = tonic::service::Routes::new(processes)
            .add_service(files)
            .into_axum_router()
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .route("/readyz", axum::routing::get(|| async { "ok" }))
            .layer(axum::middleware::from_fn(body_faults));
        Ok((Ax { shared }, router))
    }

    /// The guest's address as the sandbox `execseam run` connects to (`EXECSEAM_SANDBOX`).
    fn env(&self, shell: &Shell<Ax>) -> Vec<(String, String)> {
        vec![("EXECSEAM_SANDBOX".to_owned(), endpoint(shell))]
    }
}

/// `127.0.0.1:<port>`: what `AxProvider::connect` takes.
fn endpoint(shell: &Shell<Ax>) -> String {
    shell.base_url().trim_start_matches("http://").to_owned()
}

impl Ax {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        endpoint(&self.shared.shell)
            .parse()
            .expect("the base URL names a socket address")
    }

    /// `127.0.0.1:<port>`: what `AxProvider::connect` takes.
    pub fn endpoint(&self) -> String {
        endpoint(&self.shared.shell)
    }

    /// How many `StartProcess` requests arrived (route `exec`).
    pub fn exec_requests(&self) -> u64 {
        self.shared.faults.count("exec")
    }

    /// The directly reached guest.
    pub fn primary(&self) -> &Arc<GuestState> {
        &self.shared.primary
    }

    /// A guest by actor name.
    pub fn guest(&self, actor: &str) -> Option<Arc<GuestState>> {
        self.shared.shell.sandboxes().get(actor)
    }

    /// Adds a guest (its own sandbox) reachable with `ate-target-actor: <actor>`.
    pub fn add_guest(&self, actor: &str) -> std::io::Result<Arc<GuestState>> {
        let g = self.shared.new_guest(actor)?;
        self.shared
            .shell
            .sandboxes()
            .insert(actor.to_owned(), g.clone());
        Ok(g)
    }
}
