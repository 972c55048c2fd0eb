//! [`VercelExec`]: one sandbox, its commands (the awaited NDJSON form of `POST …/cmd`), stdin
//! through the stdin route, kill, and the files API.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use execseam_adapter_kit::http;
use execseam_adapter_kit::retry::{Call, Stage};
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Event, EventStream, Exec, Exit, Ownership, Sandbox,
};
use futures_util::StreamExt;
use reqwest::Method;

use crate::client::{Api, Body};
use crate::error::{CallError, call, map};
use crate::wire::{self, Line, LineSplitter, RunCommand, StdinWrite, TarFile};
use crate::{CAPABILITIES, PROVIDER};

/// The session's working directory, where relative paths start.
pub const SANDBOX_CWD: &str = "/vercel/sandbox";
/// Bytes per stdin request: the Python SDK's chunk, "keeping the base64 JSON body under the
/// API's 1 MB limit".
const STDIN_CHUNK: usize = 512 * 1024;

/// A Vercel sandbox: runs commands, reads and writes files. Cheap to clone (shared state).
///
/// The id is the sandbox's name. A handle from [`VercelProvider::create`](crate::VercelProvider::create)
/// owns the sandbox ([`close`](Sandbox::close) deletes it); one from
/// [`connect`](crate::VercelProvider::connect) does not.
#[derive(Clone)]
pub struct VercelExec {
    inner: Arc<Inner>,
}

struct Inner {
    api: Api,
    name: String,
    session: Mutex<String>,
    ownership: Ownership,
    /// What the sandbox's `execve` takes, asked for the first large command.
    arg_max: execseam_adapter_kit::size::ArgMax,
}

execseam_adapter_kit::debug_fields!(self => VercelExec {
    name: self.inner.name,
    session: self.session_id(),
});

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.ownership.destroy_on_drop() {
            return;
        }
        let api = self.api.clone();
        let name = self.name.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "delete the sandbox", async move {
            delete(&api, &name).await
        });
    }
}

pub(crate) async fn delete(api: &Api, name: &str) -> Result<(), Error> {
    let path = format!(
        "/v2/sandboxes/{}",
        execseam_adapter_kit::text::escape_path_segment(name)
    );
    api.send(
        Method::DELETE,
        &path,
        &[("projectId", &api.config.project_id)],
        Body::None,
        false,
    )
    .await
    .map(drop)
    .map_err(|e| map(e, call("destroy", Stage::Before)))
}

impl VercelExec {
    pub(crate) fn new(api: Api, name: String, session: String, ownership: Ownership) -> VercelExec {
        VercelExec {
            inner: Arc::new(Inner {
                api,
                name,
                session: Mutex::new(session),
                ownership,
                arg_max: execseam_adapter_kit::size::ArgMax::new(),
            }),
        }
    }

    /// The sandbox's name (its id).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The current session's id (a stopped sandbox resumes in a new one).
    pub fn session_id(&self) -> String {
        self.inner.session.lock().expect("session").clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!(
            "/v2/sandboxes/sessions/{}/{rest}",
            execseam_adapter_kit::text::escape_path_segment(&self.session_id())
        )
    }

    /// `GET /v2/sandboxes/{name}?resume=true`: a stopped sandbox gets a new session.
    async fn resume(&self) -> Result<(), CallError> {
        let path = format!(
            "/v2/sandboxes/{}",
            execseam_adapter_kit::text::escape_path_segment(&self.inner.name)
        );
        let got: wire::SandboxAndSession = self
            .inner
            .api
            .json(
                Method::GET,
                &path,
                &[
                    ("projectId", &self.inner.api.config.project_id),
                    ("resume", "true"),
                ],
                Body::None,
            )
            .await?;
        *self.inner.session.lock().expect("session") = got.session.id;
        Ok(())
    }

    /// Sends a request on the current session; a stopped sandbox is resumed and the request
    /// sent once more (the SDKs' `withResume`): a 410/422 means nothing was done.
    async fn on_session(
        &self,
        method: Method,
        rest: &str,
        query: &[(&str, &str)],
        body: impl Fn() -> Body,
        stream: bool,
    ) -> Result<reqwest::Response, CallError> {
        let api = &self.inner.api;
        if self.session_id().is_empty() {
            // Attached by name: the current session is found (and resumed) on first use.
            self.resume().await?;
        }
        match api
            .send(
                method.clone(),
                &self.session_path(rest),
                query,
                body(),
                stream,
            )
            .await
        {
            Err(e) if e.is_stopped() => {
                self.resume().await?;
                api.send(method, &self.session_path(rest), query, body(), stream)
                    .await
            }
            other => other,
        }
    }

    async fn start(&self, command: Command) -> Result<EventStream, Error> {
        // The sandbox `execve`s the argv (`command` and `args`): its limit, asked.
        self.inner
            .arg_max
            .check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)
            .await?;
        let argv = command.argv();
        let stdin = command.stdin().clone();
        let cfg = &self.inner.api.config;
        let env = command.env().clone();
        let args: Vec<String> = argv[1..].to_vec();
        let body = serde_json::to_vec(&RunCommand {
            command: &argv[0],
            args: &args,
            cwd: command.workdir(),
            env: &env,
            sudo: cfg.sudo,
            wait: true,
            logs: true,
            timeout: cfg.command_timeout.map(|d| d.as_millis() as u64),
            attach_stdin: !stdin.is_empty(),
        })
        .expect("serializable");
        // No whole-request timeout (the stream lasts as long as the command), but its head and
        // then each line must come within the idle timeout.
        let idle = cfg.stream_idle_timeout;
        let submit = self.on_session(Method::POST, "cmd", &[], || Body::Json(body.clone()), true);
        let resp = tokio::time::timeout(idle, submit)
            .await
            .map_err(|_| idle_error(idle, "exec"))?
            .map_err(|e| map(e, call("exec", Stage::Submit)))?;
        expect_ndjson(&resp, call("exec", Stage::Submit))?;
        let state = StreamState {
            exec: self.clone(),
            body: Box::pin(resp.bytes_stream()),
            lines: LineSplitter::default(),
            pending: std::collections::VecDeque::new(),
            command_id: None,
            stdin: Some(stdin),
            stdin_task: None,
            guard: KillGuard::new(self.clone()),
            done: false,
            idle,
            since: tokio::time::Instant::now(),
        };
        let kill = state.guard.kill_now();
        Ok(EventStream::new(futures_util::stream::unfold(state, next_event)).with_kill(kill))
    }

    /// `POST …/cmd/{id}/kill {signal}`.
    pub async fn kill(&self, command_id: &str, signal: u8) -> Result<(), Error> {
        let body = serde_json::to_vec(&serde_json::json!({ "signal": signal })).expect("json");
        let rest = format!(
            "cmd/{}/kill",
            execseam_adapter_kit::text::escape_path_segment(command_id)
        );
        self.inner
            .api
            .send(
                Method::POST,
                &self.session_path(&rest),
                &[],
                Body::Json(body),
                false,
            )
            .await
            .map(drop)
            .map_err(|e| map(e, call("kill", Stage::Before)))
    }

    /// Writes files (`POST …/fs/write`, one gzip'd tar, extracted by the sandbox's user); paths
    /// are absolute or relative to [`SANDBOX_CWD`]; `mode` is the file's permission bits.
    pub async fn write_files(&self, files: &[(&str, &[u8], u32)]) -> Result<(), Error> {
        let names: Vec<String> = files
            .iter()
            .map(|(p, _, _)| wire::entry_name(p, SANDBOX_CWD))
            .collect();
        let entries: Vec<TarFile<'_>> = files
            .iter()
            .zip(&names)
            .map(|((_, content, mode), name)| TarFile {
                name,
                content,
                mode: *mode,
            })
            .collect();
        let tar = wire::tar_gz(&entries).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot build the archive: {e}"),
            )
            .with_provider(PROVIDER)
        })?;
        self.on_session(
            Method::POST,
            "fs/write",
            &[],
            || Body::TarGz(tar.clone()),
            false,
        )
        .await
        .map(drop)
        .map_err(|e| map(e, call("write", Stage::Before)))
    }

    /// Reads a file (`POST …/fs/read`); a missing one is `Ok(None)` (the API's 404).
    pub async fn read_file(&self, path: &str) -> Result<Option<Bytes>, Error> {
        let body = serde_json::to_vec(&serde_json::json!({ "path": path, "cwd": SANDBOX_CWD }))
            .expect("json");
        match self
            .on_session(
                Method::POST,
                "fs/read",
                &[],
                || Body::Json(body.clone()),
                false,
            )
            .await
        {
            Ok(resp) => {
                let ct = http::content_type(resp.headers());
                if !ct.contains("application/octet-stream") {
                    return Err(map(
                        CallError::Protocol(format!(
                            "expected application/octet-stream, got {ct:?}"
                        )),
                        call("read", Stage::Before),
                    ));
                }
                resp.bytes()
                    .await
                    .map(Some)
                    .map_err(|e| map(CallError::Transport(e), call("read", Stage::Before)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(map(e, call("read", Stage::Before))),
        }
    }

    /// Makes a directory (`POST …/fs/mkdir`; `recursive` makes its parents too).
    pub async fn mkdir(&self, path: &str, recursive: bool) -> Result<(), Error> {
        let body = serde_json::to_vec(
            &serde_json::json!({ "path": path, "cwd": SANDBOX_CWD, "recursive": recursive }),
        )
        .expect("json");
        self.on_session(
            Method::POST,
            "fs/mkdir",
            &[],
            || Body::Json(body.clone()),
            false,
        )
        .await
        .map(drop)
        .map_err(|e| map(e, call("mkdir", Stage::Before)))
    }

    /// Stops the current session (`POST …/stop`); the sandbox resumes on its next use.
    pub async fn stop(&self) -> Result<(), Error> {
        self.inner
            .api
            .send(
                Method::POST,
                &self.session_path("stop"),
                &[],
                Body::None,
                false,
            )
            .await
            .map(drop)
            .map_err(|e| map(e, call("stop", Stage::Before)))
    }
}

/// Kills the command when its stream is dropped before the exit (a deadline, a cancel, a cut),
/// in the background; or, through [`KillGuard::kill_now`] (the stream's
/// [`EventStream::with_kill`]), as an awaited `POST …/cmd/{id}/kill` whose answer confirms it.
/// The two share the target: whichever comes first takes it, so the kill is sent once.
struct KillGuard {
    exec: VercelExec,
    command: Arc<Mutex<Target>>,
}

/// What the kill aims at.
#[derive(Default)]
enum Target {
    /// The command's line has not been read yet: its id is unknown.
    #[default]
    Unknown,
    /// The running command.
    Running(String),
    /// It exited, or the kill was taken (by [`KillGuard::kill_now`] or the drop).
    Done,
}

impl KillGuard {
    fn new(exec: VercelExec) -> KillGuard {
        KillGuard {
            exec,
            command: Default::default(),
        }
    }

    fn set(&self, target: Target) {
        *self.command.lock().expect("kill target") = target;
    }

    /// The awaitable kill: `Ok` once the kill request was answered with a success (the
    /// provider signals the command's process, then answers; any other answer is the kill's
    /// `Err`), or when the exit was already read. Before the command's line was read its id is unknown, so nothing
    /// can be killed: that is an `Err` (unconfirmed), never an `Ok`.
    fn kill_now(&self) -> impl FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send + 'static {
        let (exec, command) = (self.exec.clone(), self.command.clone());
        move || {
            let target =
                std::mem::replace(&mut *command.lock().expect("kill target"), Target::Done);
            Box::pin(async move {
                match target {
                    Target::Running(id) => exec.kill(&id, 9).await,
                    Target::Done => Ok(()),
                    Target::Unknown => Err(Error::new(
                        ErrorKind::Unavailable,
                        "the command's id was not read yet, so no kill could be sent: it may \
                         still run (until the provider's command timeout)",
                    )
                    .with_retry(execseam_core::Retry::Unsafe)
                    .with_provider(PROVIDER)
                    .with_operation("kill")),
                }
            })
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        let target = std::mem::replace(
            &mut *self.command.lock().expect("kill target"),
            Target::Done,
        );
        let Target::Running(id) = target else {
            return;
        };
        let exec = self.exec.clone();
        execseam_adapter_kit::reaper::spawn(
            PROVIDER,
            "kill",
            async move { exec.kill(&id, 9).await },
        );
    }
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

struct StreamState {
    exec: VercelExec,
    body: ByteStream,
    lines: LineSplitter,
    pending: std::collections::VecDeque<Vec<u8>>,
    command_id: Option<String>,
    stdin: Option<Bytes>,
    stdin_task: Option<tokio::task::JoinHandle<Result<(), Error>>>,
    guard: KillGuard,
    done: bool,
    /// The stream idle timeout, and when the current line began to be awaited.
    idle: std::time::Duration,
    since: tokio::time::Instant,
}

fn fail(e: CallError) -> Error {
    map(e, call("exec", Stage::Submit))
}

/// No stream head or line within the idle timeout: `Timeout(Request)`, `Unsafe` (the command
/// was submitted and may be running).
fn idle_error(idle: std::time::Duration, op: &'static str) -> Error {
    Error::new(
        ErrorKind::Timeout(execseam_core::Deadline::Request),
        format!(
            "no line of the command's stream for {} ms (the stream idle timeout)",
            idle.as_millis()
        ),
    )
    .with_retry(execseam_core::Retry::Unsafe)
    .with_provider(PROVIDER)
    .with_operation(op)
}

async fn next_event(mut st: StreamState) -> Option<(Result<Event, Error>, StreamState)> {
    if st.done {
        return None;
    }
    loop {
        if let Some(raw) = st.pending.pop_front() {
            let line = match wire::parse_line(&raw) {
                Ok(l) => l,
                Err(m) => {
                    st.done = true;
                    return Some((Err(fail(CallError::Protocol(m))), st));
                }
            };
            match (line, st.command_id.is_some()) {
                (Line::Command(c), false) => {
                    st.guard.set(Target::Running(c.id.clone()));
                    if let Some(input) = st.stdin.take().filter(|s| !s.is_empty()) {
                        let exec = st.exec.clone();
                        let id = c.id.clone();
                        st.stdin_task =
                            Some(tokio::spawn(
                                async move { write_stdin(&exec, &id, input).await },
                            ));
                    }
                    st.command_id = Some(c.id);
                }
                (Line::Command(c), true) => {
                    st.done = true;
                    let Some(code) = c.exit_code else {
                        return Some((
                            Err(fail(CallError::Protocol(
                                "the final command line has no exitCode".into(),
                            ))),
                            st,
                        ));
                    };
                    if let Some(task) = st.stdin_task.take()
                        && let Ok(Err(e)) = task.await
                    {
                        // The command ran: whatever the stdin request was, never `Safe`.
                        return Some((Err(execseam_adapter_kit::retry::after_submit(e)), st));
                    }
                    st.guard.set(Target::Done);
                    return Some((Ok(Event::Exit(Exit::Code(code))), st));
                }
                (_, false) => {
                    st.done = true;
                    return Some((
                        Err(fail(CallError::Protocol(
                            "output before the command line".into(),
                        ))),
                        st,
                    ));
                }
                (Line::Stdout(s), true) => return Some((Ok(Event::Stdout(Bytes::from(s))), st)),
                (Line::Stderr(s), true) => return Some((Ok(Event::Stderr(Bytes::from(s))), st)),
                (Line::Error { code, message }, true) => {
                    st.done = true;
                    return Some((Err(fail(CallError::Stream { code, message })), st));
                }
            }
            continue;
        }
        // A decode loop must not starve the runtime (a host deadline in this task): each
        // chunk costs budget, and yields when it is spent.
        tokio::task::consume_budget().await;
        let Ok(next) = tokio::time::timeout_at(st.since + st.idle, st.body.next()).await else {
            st.done = true;
            return Some((Err(idle_error(st.idle, "exec")), st));
        };
        match next {
            Some(Ok(chunk)) => match st.lines.push(&chunk) {
                Ok(lines) => {
                    if !lines.is_empty() {
                        st.since = tokio::time::Instant::now();
                    }
                    st.pending.extend(lines);
                }
                Err(m) => {
                    st.done = true;
                    return Some((Err(fail(CallError::Protocol(m))), st));
                }
            },
            Some(Err(e)) => {
                st.done = true;
                return Some((Err(fail(CallError::Transport(e))), st));
            }
            None => {
                st.done = true;
                let m = if st.lines.has_partial() {
                    "the command's stream ended in the middle of a line"
                } else if st.command_id.is_none() {
                    "the command's stream ended before the command started"
                } else {
                    "the command's stream ended before the command's exit"
                };
                return Some((Err(fail(CallError::Cut(m.into()))), st));
            }
        }
    }
}

/// Writes stdin through `POST …/cmd/{id}/stdin` (base64 chunks at confirmed offsets, then the
/// close), as the Python SDK does. A command that exited or stopped reading (`404`, `400
/// command_stdin_unavailable`) is a closed pipe, not an error.
async fn write_stdin(exec: &VercelExec, id: &str, input: Bytes) -> Result<(), Error> {
    let rest = format!(
        "cmd/{}/stdin",
        execseam_adapter_kit::text::escape_path_segment(id)
    );
    let path = exec.session_path(&rest);
    let api = &exec.inner.api;
    let mut offset = 0u64;
    let closed = |e: &CallError| {
        matches!(e, CallError::Http { status: 404, .. })
            || matches!(e, CallError::Http { status: 400, code, .. } if code == "command_stdin_unavailable")
    };
    for chunk in input.chunks(STDIN_CHUNK) {
        let data = base64::engine::general_purpose::STANDARD.encode(chunk);
        let body = Body::json(&StdinWrite {
            data: Some(&data),
            offset,
            close: false,
        });
        match api.send(Method::POST, &path, &[], body, false).await {
            Ok(_) => offset += chunk.len() as u64,
            Err(e) if closed(&e) => return Ok(()),
            Err(e) => return Err(map(e, call("stdin", Stage::Submit))),
        }
    }
    let body = Body::json(&StdinWrite {
        data: None,
        offset,
        close: true,
    });
    match api.send(Method::POST, &path, &[], body, false).await {
        Ok(_) => Ok(()),
        Err(e) if closed(&e) => Ok(()),
        Err(e) => Err(map(e, call("stdin", Stage::Before))),
    }
}

impl Exec for VercelExec {
    execseam_adapter_kit::accessors!(self => provider: PROVIDER, capabilities: CAPABILITIES);

    execseam_adapter_kit::exec_by!(start);

    /// The adapter kit's spool in the sandbox's `/tmp`, its supervisor a detached command
    /// ([`Launch`](execseam_adapter_kit::spool::Launch) below; a detached command's logs are
    /// decoded text replayed from the start, counted in characters: the spool's files are the
    /// output).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        execseam_adapter_kit::spool::hybrid(self)
    }
}

/// The spool's supervisor as a detached command (`POST …/cmd`, `wait: false`, the SDKs' detached
/// `runCommand`), without the configured command timeout: Vercel's timeout would end the
/// supervisor, not the command, and lose its exit. The command is then listed by `GET …/cmd`.
impl execseam_adapter_kit::spool::Launch for VercelExec {
    fn launch(&self, supervisor: Command) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { self.spawn_within(supervisor, None).await.map(drop) })
    }

    /// The supervisor found by its argv in `GET …/cmd` (any process can: nothing is kept
    /// here), then `GET …/cmd/{id}?wait=true` (the SDKs' `wait()`), which answers at its end.
    /// Each wait request is bounded below the request timeout and sent again until `within`.
    fn wait_supervisor<'a>(
        &'a self,
        dir: &'a str,
        within: std::time::Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + within;
            let listed: wire::CommandList = self
                .inner
                .api
                .json(Method::GET, &self.session_path("cmd"), &[], Body::None)
                .await
                .map_err(|e| map(e, call("list commands", Stage::Before)))?;
            let Some(found) = listed.commands.into_iter().rev().find(|c| {
                let argv: Vec<String> = std::iter::once(c.name.clone())
                    .chain(c.args.iter().cloned())
                    .collect();
                execseam_adapter_kit::spool::supervised_dir(&argv) == Some(dir)
            }) else {
                return Ok(false);
            };
            if found.exit_code.is_some() {
                return Ok(true);
            }
            let cmd = VercelCommand {
                exec: self.clone(),
                id: found.id,
            };
            let slice = (self.inner.api.config.request_timeout * 3 / 4)
                .max(std::time::Duration::from_millis(100));
            loop {
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                let bound = slice.min(deadline - now);
                if let Ok(waited) = tokio::time::timeout(bound, cmd.wait()).await {
                    return waited.map(|_| true);
                }
            }
        })
    }
}

execseam_adapter_kit::exec_stream_by!(VercelExec: start);

impl Sandbox for VercelExec {
    execseam_adapter_kit::sandbox_fields!(id: inner.name, ownership: inner.ownership);

    /// `DELETE /v2/sandboxes/{name}`.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(delete(&self.inner.api, &self.inner.name))
    }
}

impl VercelExec {
    /// Starts `command` without waiting (`POST …/cmd` with `wait: false`, the SDKs' detached
    /// `runCommand`): the answer is the command's id. Follow it with [`VercelCommand::wait`],
    /// [`VercelCommand::logs`] and [`VercelCommand::kill`]. A detached command takes no stdin
    /// here (`Unsupported` before any request: [`Exec::exec`] sends stdin).
    pub async fn spawn(&self, command: Command) -> Result<VercelCommand, Error> {
        let timeout = self.inner.api.config.command_timeout;
        self.spawn_within(command, timeout).await
    }

    /// [`VercelExec::spawn`] with Vercel's `timeout` for the command (`None`: none).
    async fn spawn_within(
        &self,
        command: Command,
        timeout: Option<std::time::Duration>,
    ) -> Result<VercelCommand, Error> {
        if !command.stdin().is_empty() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "a detached command takes no stdin (exec sends it through the stdin route)",
            )
            .with_provider(PROVIDER)
            .with_operation("spawn"));
        }
        // The sandbox `execve`s the argv (`command` and `args`): its limit, asked.
        self.inner
            .arg_max
            .check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)
            .await?;
        let argv = command.argv();
        let cfg = &self.inner.api.config;
        let args: Vec<String> = argv[1..].to_vec();
        let body = serde_json::to_vec(&RunCommand {
            command: &argv[0],
            args: &args,
            cwd: command.workdir(),
            env: command.env(),
            sudo: cfg.sudo,
            wait: false,
            logs: false,
            timeout: timeout.map(|d| d.as_millis() as u64),
            attach_stdin: false,
        })
        .expect("serializable");
        let resp = self
            .on_session(Method::POST, "cmd", &[], || Body::Json(body.clone()), false)
            .await
            .map_err(|e| map(e, call("spawn", Stage::Submit)))?;
        let bytes = crate::client::read_bounded(
            resp,
            crate::client::MAX_JSON_BODY,
            self.inner.api.config.request_timeout,
        )
        .await
        .map_err(|e| map(e, call("spawn", Stage::Submit)))?;
        let got: wire::CommandResponse = serde_json::from_slice(&bytes).map_err(|e| {
            map(
                CallError::Protocol(format!("the answer is not {{command}}: {e}")),
                call("spawn", Stage::Submit),
            )
        })?;
        Ok(VercelCommand {
            exec: self.clone(),
            id: got.command.id,
        })
    }
}

/// A command started by [`VercelExec::spawn`]. Dropping it does nothing (the command goes on).
#[derive(Clone, Debug)]
pub struct VercelCommand {
    exec: VercelExec,
    id: String,
}

impl VercelCommand {
    /// The command's id (`cmd_…`).
    pub fn id(&self) -> &str {
        &self.id
    }

    fn path(&self, rest: &str) -> String {
        let id = execseam_adapter_kit::text::escape_path_segment(&self.id);
        if rest.is_empty() {
            format!("cmd/{id}")
        } else {
            format!("cmd/{id}/{rest}")
        }
    }

    /// Waits for the exit (`GET …/cmd/{id}?wait=true`, the SDKs' `wait()`): 128+n for a
    /// signal, as `Exit::Code`.
    pub async fn wait(&self) -> Result<Exit, Error> {
        let got: wire::CommandResponse = self
            .exec
            .inner
            .api
            .json(
                Method::GET,
                &self.exec.session_path(&self.path("")),
                &[("wait", "true")],
                Body::None,
            )
            .await
            .map_err(|e| map(e, call("wait", Stage::Before)))?;
        match got.command.exit_code {
            Some(code) => Ok(Exit::Code(code)),
            None => Err(map(
                CallError::Protocol("the waited command has no exitCode".into()),
                call("wait", Stage::Before),
            )),
        }
    }

    /// Its output from the start (`GET …/cmd/{id}/logs`, NDJSON `{"stream","data"}` lines, the
    /// exact content type checked), as `Stdout`/`Stderr` events, live until the command ends,
    /// then its exit (from [`wait`](Self::wait), as the SDKs' `output()` does): `collect()`
    /// gives the whole [`Output`](execseam_core::Output). A cut stream or a line the SDKs would
    /// reject is an error, never a quiet end.
    pub async fn logs(&self) -> Result<EventStream, Error> {
        let idle = self.exec.inner.api.config.stream_idle_timeout;
        let path = self.exec.session_path(&self.path("logs"));
        let send = self
            .exec
            .inner
            .api
            .send(Method::GET, &path, &[], Body::None, true);
        let resp = tokio::time::timeout(idle, send)
            .await
            .map_err(|_| idle_error(idle, "logs").with_retry(execseam_core::Retry::SAFE))?
            .map_err(|e| map(e, call("logs", Stage::Before)))?;
        expect_ndjson(&resp, call("logs", Stage::Before))?;
        struct St {
            cmd: VercelCommand,
            body: futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
            lines: LineSplitter,
            pending: std::collections::VecDeque<Result<Event, Error>>,
            done: bool,
        }
        let st = St {
            cmd: self.clone(),
            body: Box::pin(resp.bytes_stream()),
            lines: LineSplitter::default(),
            pending: std::collections::VecDeque::new(),
            done: false,
        };
        let fail = |e: CallError| map(e, call("logs", Stage::Before));
        Ok(EventStream::new(futures_util::stream::unfold(
            st,
            move |mut st| async move {
                loop {
                    if let Some(ev) = st.pending.pop_front() {
                        return Some((ev, st));
                    }
                    if st.done {
                        return None;
                    }
                    tokio::task::consume_budget().await;
                    let Ok(next) = tokio::time::timeout(idle, st.body.next()).await else {
                        st.done = true;
                        return Some((
                            Err(idle_error(idle, "logs").with_retry(execseam_core::Retry::SAFE)),
                            st,
                        ));
                    };
                    match next {
                        Some(Ok(chunk)) => {
                            let lines = match st.lines.push(&chunk) {
                                Ok(l) => l,
                                Err(m) => {
                                    st.done = true;
                                    st.pending.push_back(Err(fail(CallError::Protocol(m))));
                                    continue;
                                }
                            };
                            for line in lines {
                                let ev = match wire::parse_line(&line) {
                                    Ok(Line::Stdout(s)) => Ok(Event::Stdout(Bytes::from(s))),
                                    Ok(Line::Stderr(s)) => Ok(Event::Stderr(Bytes::from(s))),
                                    Ok(Line::Command(_)) => continue,
                                    Ok(Line::Error { code, message }) => {
                                        st.done = true;
                                        Err(fail(CallError::Stream { code, message }))
                                    }
                                    Err(m) => {
                                        st.done = true;
                                        Err(fail(CallError::Protocol(m)))
                                    }
                                };
                                let stop = ev.is_err();
                                st.pending.push_back(ev);
                                if stop {
                                    break;
                                }
                            }
                        }
                        Some(Err(e)) => {
                            st.done = true;
                            st.pending.push_back(Err(fail(CallError::Transport(e))));
                        }
                        None => {
                            st.done = true;
                            if st.lines.has_partial() {
                                st.pending.push_back(Err(fail(CallError::Cut(
                                    "the logs ended in the middle of a line".into(),
                                ))));
                            } else {
                                st.pending.push_back(st.cmd.wait().await.map(Event::Exit));
                            }
                        }
                    }
                }
            },
        )))
    }

    /// Sends `signal` to it (`POST …/cmd/{id}/kill`).
    pub async fn kill(&self, signal: u8) -> Result<(), Error> {
        self.exec.kill(&self.id, signal).await
    }
}

/// A command stream's head: NDJSON, or a protocol error of `c`.
fn expect_ndjson(resp: &reqwest::Response, c: Call) -> Result<(), Error> {
    let ct = http::content_type(resp.headers());
    if ct == "application/x-ndjson" {
        return Ok(());
    }
    Err(map(
        CallError::Protocol(format!("expected application/x-ndjson, got {ct:?}")),
        c,
    ))
}
