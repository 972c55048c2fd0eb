//! [`NorthflankExec`]: commands in one service's (or job's) container over the exec WebSocket.

use std::collections::VecDeque;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, StderrGate, StdinFrom, WrapOptions};
use execseam_adapter_kit::retry::Stage;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Event, EventStream, Exec, Exit, Ownership, Sandbox,
};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio_websockets::Message;

use crate::client::{Api, Ws};
use crate::error::{CallError, call, map};
use crate::wire::{self, ExecContext, ServerFrame};
use crate::{CAPABILITIES, PROVIDER};

const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::STANDARD;

/// What a handle runs in: a service's or a job's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `services/{id}`.
    Service(String),
    /// `jobs/{id}`.
    Job(String),
}

impl Target {
    /// `svc`, `services/svc` or `jobs/job`.
    pub fn parse(id: &str) -> Result<Target, Error> {
        let t = match id.split_once('/') {
            None => Target::Service(id.to_owned()),
            Some(("services", s)) => Target::Service(s.to_owned()),
            Some(("jobs", j)) => Target::Job(j.to_owned()),
            Some(_) => {
                return Err(Error::new(
                    ErrorKind::InvalidCommand,
                    format!(
                        "{id:?} is not a service or job id (`svc`, `services/svc`, `jobs/job`)"
                    ),
                )
                .with_provider(PROVIDER));
            }
        };
        match &t {
            Target::Service(s) | Target::Job(s) if s.is_empty() || s.contains('/') => {
                Err(Error::new(
                    ErrorKind::InvalidCommand,
                    format!("{id:?} is not a service or job id"),
                )
                .with_provider(PROVIDER))
            }
            _ => Ok(t),
        }
    }

    pub(crate) fn segment(&self) -> (&'static str, &str) {
        match self {
            Target::Service(s) => ("services", s),
            Target::Job(j) => ("jobs", j),
        }
    }

    /// The id as [`Sandbox::id`] gives it (`svc` or `jobs/job`).
    pub fn id(&self) -> String {
        match self {
            Target::Service(s) => s.clone(),
            Target::Job(j) => format!("jobs/{j}"),
        }
    }
}

/// One service's or job's container. Cheap to clone. Northflank's exec has no create or
/// delete: handles come from [`NorthflankProvider::connect`](crate::NorthflankProvider::connect)
/// and never own what they run in.
#[derive(Clone, Debug)]
pub struct NorthflankExec {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    api: Api,
    target: Target,
    id: String,
    ownership: Ownership,
    /// What the container's `execve` takes, asked for the first large command.
    arg_max: execseam_adapter_kit::size::ArgMax,
}

impl NorthflankExec {
    pub(crate) fn new(api: Api, target: Target) -> NorthflankExec {
        NorthflankExec {
            inner: Arc::new(Inner {
                id: target.id(),
                api,
                target,
                ownership: Ownership::never_owned(),
                arg_max: execseam_adapter_kit::size::ArgMax::new(),
            }),
        }
    }

    /// The service or job.
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    async fn start(&self, command: Command) -> Result<EventStream, Error> {
        // The container `execve`s the argv: its limit, asked.
        self.inner
            .arg_max
            .check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)
            .await?;
        let api = &self.inner.api;
        let c = &api.config;
        // workdir and env through the `/bin/sh -c` wrapper: the protocol has neither.
        let wrapped = command.workdir().is_some() || !command.env().is_empty();
        let wrap = WrapOptions {
            workdir: true,
            env: true,
            stdin: StdinFrom::Backend,
            ..WrapOptions::default()
        };
        let argv = if wrapped {
            degrade::wrap(&command, &wrap).map_err(|e| e.or_context(PROVIDER, "exec"))?
        } else {
            command.argv().to_vec()
        };
        // What counts is what the container execs (a wrapper script is one string), against
        // the container's own limit once asked.
        let limit = self.inner.arg_max.limit_or(&crate::SIZE_LIMIT);
        execseam_adapter_kit::size::check_wire(PROVIDER, &argv, &limit)?;
        let (segment, id) = self.inner.target.segment();
        let path = wire::exec_path(c.team_id.as_deref(), &c.project_id, segment, id);
        let ws = api.upgrade(&path, call("exec", Stage::Before)).await?;
        let (mut sink, stream) = ws.split();
        let init = wire::init_frame(
            c.token(),
            &ExecContext {
                command: &argv,
                shell: "none",
                encoding: "base64",
                tty: false,
                instance_name: c.instance_name.as_deref(),
                container_name: c.container_name.as_deref(),
                user: c.user.as_deref(),
                group: c.group.as_deref(),
            },
        );
        sink.send(Message::text(init)).await.map_err(|e| {
            map(
                CallError::Closed(format!("the exec socket broke: {e}")),
                call("exec", Stage::Submit),
            )
        })?;
        let stdin = command.stdin().clone();
        if stdin.is_empty() {
            // As the Python one-shot does: the end of stdin right behind `init`.
            sink.send(Message::text(wire::STDIN_END))
                .await
                .map_err(|e| {
                    map(
                        CallError::Closed(format!("the exec socket broke: {e}")),
                        call("exec", Stage::Submit),
                    )
                })?;
        }
        let st = St {
            stream,
            sink: Some(sink),
            stdin: (!stdin.is_empty()).then_some(stdin),
            chunk: c.stdin_chunk,
            stdin_task: None,
            started: false,
            held: if wrapped {
                StderrGate::new(&wrap)
            } else {
                StderrGate::open()
            },
            wrap,
            queue: VecDeque::new(),
            done: false,
            idle: c.idle_timeout,
        };
        Ok(EventStream::new(futures_util::stream::unfold(st, next)))
    }
}

type Sink = SplitSink<Ws, Message>;

struct St {
    stream: SplitStream<Ws>,
    sink: Option<Sink>,
    stdin: Option<Bytes>,
    chunk: usize,
    stdin_task: Option<tokio::task::JoinHandle<Option<Sink>>>,
    started: bool,
    /// For a wrapped command: stderr held back while it could be the wrapper's own failure.
    held: StderrGate,
    wrap: WrapOptions,
    queue: VecDeque<Event>,
    done: bool,
    /// The longest wait for one frame.
    idle: std::time::Duration,
}

/// No frame within the idle timeout: `Timeout(Request)`, `Unsafe` (the command was sent and may
/// be running).
fn idle_error(idle: std::time::Duration) -> Error {
    Error::new(
        ErrorKind::Timeout(execseam_core::Deadline::Request),
        format!(
            "no frame on the exec socket for {} ms (the idle timeout)",
            idle.as_millis()
        ),
    )
    .with_retry(execseam_core::Retry::Unsafe)
    .with_provider(PROVIDER)
    .with_operation("exec")
}

fn fail(e: CallError) -> Error {
    map(e, call("exec", Stage::Submit))
}

/// Sends stdin as `payload` frames, then `stdInEnd`; gives the sink back.
fn spawn_stdin(mut sink: Sink, data: Bytes, chunk: usize) -> tokio::task::JoinHandle<Option<Sink>> {
    tokio::spawn(async move {
        for part in data.chunks(chunk) {
            let frame = wire::payload_frame(&B64.encode(part));
            if sink.send(Message::text(frame)).await.is_err() {
                return None;
            }
        }
        sink.send(Message::text(wire::STDIN_END)).await.ok()?;
        Some(sink)
    })
}

async fn next(mut st: St) -> Option<(Result<Event, Error>, St)> {
    loop {
        if let Some(ev) = st.queue.pop_front() {
            return Some((Ok(ev), st));
        }
        if st.done {
            return None;
        }
        // A decode loop must not starve the runtime: each frame costs budget.
        tokio::task::consume_budget().await;
        let Ok(next) = tokio::time::timeout(st.idle, st.stream.next()).await else {
            st.done = true;
            return Some((Err(idle_error(st.idle)), st));
        };
        let msg = match next {
            Some(Ok(m)) if m.is_text() || m.is_binary() => Bytes::from(m.into_payload()),
            Some(Ok(m)) if m.is_close() => {
                st.done = true;
                return Some((
                    Err(fail(CallError::Closed(
                        "the exec socket closed before the completion frame".into(),
                    ))),
                    st,
                ));
            }
            None => {
                st.done = true;
                return Some((
                    Err(fail(CallError::Closed(
                        "the exec socket closed before the completion frame".into(),
                    ))),
                    st,
                ));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                st.done = true;
                return Some((
                    Err(fail(CallError::Closed(format!(
                        "the exec socket broke: {e}"
                    )))),
                    st,
                ));
            }
        };
        let frame = match wire::parse_frame(&msg) {
            Ok(f) => f,
            Err(m) => {
                st.done = true;
                return Some((Err(fail(CallError::Protocol(m))), st));
            }
        };
        match frame {
            ServerFrame::Ready => {
                st.started = true;
                if let (Some(data), Some(sink)) = (st.stdin.take(), st.sink.take()) {
                    st.stdin_task = Some(spawn_stdin(sink, data, st.chunk));
                }
            }
            ServerFrame::AuthFailed(m) => {
                st.done = true;
                return Some((
                    Err(map(CallError::AuthFailed(m), call("exec", Stage::Submit))),
                    st,
                ));
            }
            ServerFrame::Stdout(d) | ServerFrame::Stderr(d)
                if B64.decode(d.as_bytes()).is_err() =>
            {
                st.done = true;
                return Some((
                    Err(fail(CallError::Protocol(
                        "output that is not base64".into(),
                    ))),
                    st,
                ));
            }
            ServerFrame::Stdout(d) => {
                let b = Bytes::from(B64.decode(d.as_bytes()).expect("checked"));
                if !b.is_empty() {
                    st.queue.push_back(Event::Stdout(b));
                }
            }
            ServerFrame::Stderr(d) => {
                let b = Bytes::from(B64.decode(d.as_bytes()).expect("checked"));
                if let Some(b) = st.held.push(b).filter(|b| !b.is_empty()) {
                    st.queue.push_back(Event::Stderr(b));
                }
            }
            ServerFrame::Error(message) => {
                st.done = true;
                let started = st.started;
                return Some((Err(fail(CallError::Frame { message, started })), st));
            }
            ServerFrame::Completion {
                exit_code,
                status,
                message,
            } => {
                st.done = true;
                let Some(code) = exit_code else {
                    return Some((
                        Err(fail(CallError::Protocol(format!(
                            "the completion has no usable exitCode (status {status:?}: {message})"
                        )))),
                        st,
                    ));
                };
                match st.wrap.check(st.held.finish(Exit::Code(code))) {
                    Err(e) => return Some((Err(e.or_context(PROVIDER, "exec")), st)),
                    Ok(held) if !held.stderr.is_empty() => {
                        st.queue.push_back(Event::Stderr(held.stderr));
                    }
                    Ok(_) => {}
                }
                st.queue.push_back(Event::Exit(Exit::Code(code)));
                // Close politely (best effort); the server closes too.
                let sink = match st.stdin_task.take() {
                    Some(t) => t.await.ok().flatten(),
                    None => st.sink.take(),
                };
                if let Some(mut s) = sink {
                    let _ = s.send(Message::close(None, "")).await;
                }
            }
        }
    }
}

impl Exec for NorthflankExec {
    execseam_adapter_kit::accessors!(self => provider: PROVIDER, capabilities: CAPABILITIES);

    execseam_adapter_kit::exec_by!(start);

    /// The adapter kit's spool in the container's `/tmp` (the exec WebSocket has no detach and no
    /// reattach: a command ends with its connection).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        execseam_adapter_kit::spool::processes(self)
    }
}

execseam_adapter_kit::exec_stream_by!(NorthflankExec: start);

impl Sandbox for NorthflankExec {
    execseam_adapter_kit::accessors!(self => id: &self.inner.id, ownership: &self.inner.ownership);

    /// A Northflank service or job is never this adapter's to delete (connect-only).
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            Err(Error::unsupported(
                "Northflank's exec cannot delete the service or job it runs in (connect-only)",
            )
            .with_provider(PROVIDER)
            .with_operation("destroy"))
        })
    }
}
