//! The `Exec` / `ExecStream` implementation over the bridge's exec SSE stream.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use execseam_adapter_kit::degrade::{
    self, StderrGate, StdinFrom, WRAPPER_MARK, WRAPPER_STATUS, WrapOptions, quote,
};
use execseam_adapter_kit::exec_span;
use execseam_core::{
    BoxFuture, Capabilities, Command, Deadline, Error, ErrorKind, Event, EventStream, Exec,
    ExecStream, Exit, Output, Ownership, PartialOutput, Retry, Sandbox,
};
use futures_util::StreamExt;

use crate::client::{BridgeClient, ExecEvents};
use crate::config::{CloudflareConfig, OutputMode};
use crate::error::{protocol, stream_error};
use crate::wire::{ExecEvent, ExecRequest};
use crate::{CAPABILITIES, CAPABILITIES_EXACT, PROVIDER};
use execseam_adapter_kit::retry::Stage;

/// Where the adapter keeps its temporary files (stdin, captured output, the sandbox marker): the
/// bridge's files API only reaches `/workspace`.
pub const TEMP_DIR: &str = "/workspace/.execseam";

/// The largest body the bridge's file write accepts (`MAX_WRITE_BYTES`).
pub const MAX_WRITE: u64 = 32 * 1024 * 1024;

const VANISHED: &str = "sandbox container replaced";
const CAPTURE_FAILED: &str = "cannot create the output capture files";
/// The line the sandbox (sessionless, `timeout_ms` set) appends to stderr before exit 124.
const TIMED_OUT: &str = "Command timed out after ";

/// Runs commands in one Cloudflare sandbox through the bridge Worker. See the [crate docs](crate).
#[derive(Clone)]
pub struct CloudflareExec {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    client: BridgeClient,
    sandbox_id: String,
    marker: Option<String>,
    ownership: Ownership,
    /// The terminals this handle opened (`terminal.rs`).
    terminals: execseam_adapter_kit::attached::Terminals,
}

impl Drop for Inner {
    /// The safety net: an owned sandbox nobody closed is deleted on the runtime, if there is one.
    fn drop(&mut self) {
        if !self.ownership.destroy_on_drop() {
            return;
        }
        let client = self.client.clone();
        let id = self.sandbox_id.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "delete the sandbox", async move {
            client.delete_sandbox(&id).await
        });
    }
}

impl std::fmt::Debug for CloudflareExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudflareExec")
            .field("sandbox_id", &self.inner.sandbox_id)
            .field("mode", &self.inner.client.config().output_mode())
            .field("verified", &self.inner.marker.is_some())
            .finish()
    }
}

fn fail_line(what: &str) -> String {
    format!(
        "{{ printf '%s\\n' {} >&2; exit {WRAPPER_STATUS}; }}",
        quote(&format!("{WRAPPER_MARK}{what}"))
    )
}

impl CloudflareExec {
    /// A handle on sandbox `sandbox_id`. With `verify_sandbox` (the default) it writes a marker
    /// file into `/workspace/.execseam/`, which assigns the sandbox its container; every later
    /// command first checks that the marker is still there. Answers that are safe to retry
    /// (`capacity_exceeded`, `pool_error`, 429, connection refused) are retried with exponential
    /// backoff, `connect_attempts` times in all.
    pub(crate) async fn open(
        client: BridgeClient,
        sandbox_id: String,
        ownership: Ownership,
    ) -> Result<CloudflareExec, Error> {
        let attempts = client.config().connect_attempts;
        let marker = if client.config().verify_sandbox {
            let path = degrade::temp_path(TEMP_DIR).replace(".execseam-", "sandbox-");
            with_backoff(attempts, || {
                client.write_file(&sandbox_id, &path, Bytes::from(sandbox_id.clone()))
            })
            .await?;
            Some(path)
        } else {
            None
        };
        tracing::debug!(provider = PROVIDER, sandbox = %sandbox_id, "connected");
        Ok(CloudflareExec::from_parts(
            client, sandbox_id, marker, ownership,
        ))
    }

    pub(crate) fn from_parts(
        client: BridgeClient,
        sandbox_id: String,
        marker: Option<String>,
        ownership: Ownership,
    ) -> CloudflareExec {
        CloudflareExec {
            inner: Arc::new(Inner {
                client,
                sandbox_id,
                marker,
                ownership,
                terminals: execseam_adapter_kit::attached::Terminals::default(),
            }),
        }
    }

    /// The underlying bridge client (files, sessions, `running`, the terminal's socket).
    pub(crate) fn client(&self) -> &BridgeClient {
        &self.inner.client
    }

    pub(crate) fn terminals(&self) -> &execseam_adapter_kit::attached::Terminals {
        &self.inner.terminals
    }

    /// The sandbox id (26 base32 characters when the bridge minted it).
    pub fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    /// The capabilities of an adapter configured so (its output mode, its terminals).
    pub fn capabilities_of(config: &CloudflareConfig) -> Capabilities {
        let c = match config.output_mode() {
            OutputMode::Streaming => CAPABILITIES,
            OutputMode::Exact => CAPABILITIES_EXACT,
        };
        Capabilities {
            processes: Some(
                config
                    .terminal
                    .capabilities(execseam_adapter_kit::spool::SPOOLED),
            ),
            ..c
        }
    }

    /// The same sandbox through a handle that holds nothing of this one (no terminals, not
    /// owned): what a terminal's background work runs on, so that it never keeps this handle.
    pub(crate) fn sibling(&self) -> CloudflareExec {
        CloudflareExec::from_parts(
            self.inner.client.clone(),
            self.inner.sandbox_id.clone(),
            self.inner.marker.clone(),
            Ownership::connected(),
        )
    }

    pub(crate) fn terminal_mode(&self) -> execseam_adapter_kit::attached::TerminalMode {
        self.config().terminal
    }

    fn config(&self) -> &CloudflareConfig {
        self.inner.client.config()
    }

    /// A sandbox this handle destroyed is gone; no request is sent, because the bridge would
    /// give the id a fresh container (`getSandbox` creates on first use).
    fn not_destroyed(&self, operation: &'static str) -> Result<(), Error> {
        if self.inner.ownership.is_destroyed() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("sandbox {} was destroyed", self.inner.sandbox_id),
            )
            .with_provider(PROVIDER)
            .with_operation(operation));
        }
        Ok(())
    }

    /// The script the sandbox runs: the sandbox check, the output capture (exact mode), then
    /// the degrade wrapper in a subshell, so that a command killed by a signal is reported as
    /// the shell's 128+n by a process that exits normally (the bridge only carries a number).
    fn prepare(
        &self,
        cmd: &Command,
        capture: Option<&(String, String)>,
    ) -> Result<Prepared, Error> {
        if cmd.stdin().len() as u64 > MAX_WRITE {
            return Err(Error::new(
                ErrorKind::InvalidCommand,
                format!(
                    "stdin of {} bytes exceeds the bridge's file write limit of {MAX_WRITE} bytes",
                    cmd.stdin().len()
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("exec"));
        }
        let stdin =
            (!cmd.stdin().is_empty()).then(|| (degrade::temp_path(TEMP_DIR), cmd.stdin().clone()));
        let opts = WrapOptions {
            workdir: true,
            env: true,
            stdin: match &stdin {
                Some((path, _)) => StdinFrom::File(path.clone()),
                None => StdinFrom::Backend,
            },
            ..WrapOptions::default()
        };
        let inner = degrade::script(cmd, &opts).map_err(|e| e.with_provider(PROVIDER))?;
        let mut s = String::new();
        if let Some(marker) = &self.inner.marker {
            let _ = writeln!(
                s,
                "[ -e {} ] || {}",
                quote(marker),
                fail_line(&format!("{VANISHED}: {marker} is missing"))
            );
        }
        if let Some((out, err)) = capture {
            let _ = writeln!(
                s,
                "{{ mkdir -p {dir} && : > {o} && : > {e}; }} 2>/dev/null || {}",
                fail_line(CAPTURE_FAILED),
                dir = quote(TEMP_DIR),
                o = quote(out),
                e = quote(err)
            );
            let _ = writeln!(s, "exec 1> {} 2> {}", quote(out), quote(err));
        }
        let _ = write!(s, "(\n{inner}\n)\nexit $?");
        let argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), s];
        // What counts is the `bash -c` string the bridge makes: argv shell-quoted and joined
        // (measured with the same single-quote scheme).
        execseam_adapter_kit::size::check_wire(
            PROVIDER,
            &[degrade::join(&argv)],
            &crate::SIZE_LIMIT,
        )?;
        Ok(Prepared {
            request: ExecRequest {
                argv,
                timeout_ms: self
                    .config()
                    .command_timeout
                    .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64),
                cwd: None,
            },
            stdin,
        })
    }

    /// Uploads stdin (if any) and submits the exec, once.
    async fn submit(&self, p: &Prepared) -> Result<ExecEvents, Error> {
        let id = &self.inner.sandbox_id;
        if let Some((path, data)) = &p.stdin {
            self.inner
                .client
                .write_file(id, path, data.clone())
                .await
                .map_err(|e| e.with_operation("exec"))?;
        }
        tracing::debug!(provider = PROVIDER, sandbox = %id, "exec");
        self.inner.client.exec(id, &p.request).await
    }

    async fn stream_mode(&self, cmd: Command) -> Result<EventStream, Error> {
        let p = self.prepare(&cmd, None)?;
        let events = self.submit(&p).await?;
        Ok(EventStream::new(events_to_stream(
            events,
            self.config().command_timeout.is_some(),
        )))
    }

    async fn exact_mode(&self, cmd: Command) -> Result<Output, Error> {
        let base = degrade::temp_path(TEMP_DIR);
        let files = (format!("{base}.out"), format!("{base}.err"));
        let p = self.prepare(&cmd, Some(&files))?;
        let events = self.submit(&p).await?;
        // What reaches the stream in this mode: the wrapper's own failures before the capture
        // starts, and the sandbox's timeout line.
        let (_, streamed_err, exit) = collect_raw(events).await?;
        let streamed = Output::new(Bytes::new(), streamed_err.freeze(), exit);
        if exit == Exit::Code(WRAPPER_STATUS)
            && streamed.stderr.starts_with(WRAPPER_MARK.as_bytes())
        {
            return wrapper_failure(streamed);
        }
        let id = &self.inner.sandbox_id;
        let client = &self.inner.client;
        // The command ran: a failure from here on must not invite a retry of the exec.
        let unsafe_after = |e: Error| e.with_operation("exec").with_retry(Retry::Unsafe);
        let stdout = client.read_file(id, &files.0).await.map_err(unsafe_after)?;
        let stderr = client.read_file(id, &files.1).await.map_err(unsafe_after)?;
        self.cleanup(&files).await;
        if timed_out(
            self.config().command_timeout.is_some(),
            exit,
            &streamed.stderr,
        ) {
            return Err(timeout_error(stdout, stderr));
        }
        let output = Output::new(stdout, stderr, exit);
        degrade::check_wrapped(output).map_err(|e| e.with_provider(PROVIDER))
    }

    /// Removes the capture files with one more (sessionless, unchecked) exec; failures are only
    /// logged: the result is already known.
    async fn cleanup(&self, files: &(String, String)) {
        let request = ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("rm -f -- {} {}", quote(&files.0), quote(&files.1)),
            ],
            timeout_ms: None,
            cwd: None,
        };
        let r = async {
            let events = self
                .inner
                .client
                .exec(&self.inner.sandbox_id, &request)
                .await?;
            collect_raw(events).await
        }
        .await;
        if let Err(e) = r {
            tracing::debug!(provider = PROVIDER, error = %e, "could not remove the capture files");
        }
    }
}

/// Retries an operation that cannot run a command while its error says retrying is safe.
pub(crate) async fn with_backoff<T, F, Fut>(attempts: u32, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut delay = Duration::from_millis(250);
    let mut n = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if n < attempts && e.retry().is_safe() => {
                // Beyond the cap: fail now with the delay in the error, never a clamped sleep.
                let Some(wait) =
                    execseam_adapter_kit::retry::own_retry_wait(e.retry().after(), delay)
                else {
                    return Err(e);
                };
                tracing::debug!(provider = PROVIDER, error = %e, ?wait, "retrying");
                tokio::time::sleep(wait).await;
                delay = (delay * 2).min(Duration::from_secs(8));
                n += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

struct Prepared {
    request: ExecRequest,
    stdin: Option<(String, Bytes)>,
}

fn exit_of(code: i64) -> Result<Exit, Error> {
    i32::try_from(code).map(Exit::Code).map_err(|_| {
        protocol(
            format!("exit code {code} is out of range"),
            "exec",
            Stage::After,
        )
    })
}

/// Reads the stream to its `exit`: stdout, stderr and the exit, or an error carrying what came.
async fn collect_raw(mut events: ExecEvents) -> Result<(BytesMut, BytesMut, Exit), Error> {
    let (mut out, mut err) = (BytesMut::new(), BytesMut::new());
    let fail = |e: Error, out: &BytesMut, err: &BytesMut| {
        e.with_partial(PartialOutput {
            stdout: out.clone().freeze(),
            stderr: err.clone().freeze(),
        })
    };
    while let Some(item) = events.next().await {
        match item {
            Ok(ExecEvent::Stdout(b)) => out.extend_from_slice(&b),
            Ok(ExecEvent::Stderr(b)) => err.extend_from_slice(&b),
            Ok(ExecEvent::Exit(code)) => return Ok((out, err, exit_of(code)?)),
            Ok(ExecEvent::Error(e)) => return Err(fail(stream_error(&e), &out, &err)),
            Ok(ExecEvent::Other(_)) => {}
            Err(e) => return Err(fail(e, &out, &err)),
        }
    }
    Err(fail(
        protocol(
            "the exec stream ended without an exit event",
            "exec",
            Stage::After,
        ),
        &out,
        &err,
    ))
}

/// Maps a failure of the adapter's own script (the sandbox check, the capture) or of the degrade
/// wrapper to a typed error.
fn wrapper_failure(output: Output) -> Result<Output, Error> {
    if output.exit != Exit::Code(WRAPPER_STATUS)
        || !output.stderr.starts_with(WRAPPER_MARK.as_bytes())
    {
        return Ok(output);
    }
    let line = String::from_utf8_lossy(&output.stderr[WRAPPER_MARK.len()..])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    if line.starts_with(VANISHED) {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "{line}: the sandbox's container was destroyed or replaced, and the bridge gave its id a fresh one (the workspace is gone)"
            ),
        )
        .with_provider(PROVIDER)
        .with_operation("exec"));
    }
    degrade::check_wrapped(output).map_err(|e| e.with_provider(PROVIDER))
}

fn timed_out(enabled: bool, exit: Exit, stderr: &[u8]) -> bool {
    if !enabled || exit != Exit::Code(124) {
        return false;
    }
    // The container emits `Command timed out after ${timeoutMs}ms\n` as is, with no newline
    // inserted before it, so it may end a partial line of the command's own stderr.
    let text = String::from_utf8_lossy(stderr);
    let last = text
        .trim_end_matches('\n')
        .rsplit('\n')
        .next()
        .unwrap_or("");
    last.rfind(TIMED_OUT).is_some_and(|i| {
        last[i + TIMED_OUT.len()..]
            .strip_suffix("ms")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn timeout_error(stdout: Bytes, stderr: Bytes) -> Error {
    timeout_base().with_partial(PartialOutput { stdout, stderr })
}

fn timeout_base() -> Error {
    Error::new(
        ErrorKind::Timeout(Deadline::Command),
        "the sandbox killed the command when timeout_ms expired",
    )
    .with_provider(PROVIDER)
    .with_operation("exec")
    .with_retry(Retry::Unsafe)
}

struct StreamState {
    events: ExecEvents,
    /// Holds back the start of stderr while it may still be the wrapper's failure line.
    held: StderrGate,
    tail: Vec<u8>,
    timeout_enabled: bool,
    queue: VecDeque<Result<Event, Error>>,
    done: bool,
}

/// Turns bridge events into `Event`s: exactly one `Exit`, last, or an `Err`.
fn events_to_stream(
    events: ExecEvents,
    timeout_enabled: bool,
) -> impl futures_util::Stream<Item = Result<Event, Error>> + Send {
    let st = StreamState {
        events,
        held: StderrGate::new(&WrapOptions::default()),
        tail: Vec::new(),
        timeout_enabled,
        queue: VecDeque::new(),
        done: false,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            let item = st.events.next().await;
            match item {
                Some(Ok(ExecEvent::Stdout(b))) => {
                    if !b.is_empty() {
                        return Some((Ok(Event::Stdout(b)), st));
                    }
                }
                Some(Ok(ExecEvent::Stderr(b))) => {
                    st.tail.extend_from_slice(&b);
                    if st.tail.len() > 512 {
                        let cut = st.tail.len() - 512;
                        st.tail.drain(..cut);
                    }
                    if let Some(b) = st.held.push(b)
                        && !b.is_empty()
                    {
                        return Some((Ok(Event::Stderr(b)), st));
                    }
                }
                Some(Ok(ExecEvent::Exit(code))) => {
                    st.done = true;
                    let exit = match exit_of(code) {
                        Ok(e) => e,
                        Err(e) => return Some((Err(e), st)),
                    };
                    match wrapper_failure(st.held.finish(exit)) {
                        Err(e) => return Some((Err(e), st)),
                        Ok(o) if !o.stderr.is_empty() => {
                            st.queue.push_back(Ok(Event::Stderr(o.stderr)));
                        }
                        Ok(_) => {}
                    }
                    if timed_out(st.timeout_enabled, exit, &st.tail) {
                        // `EventStream::collect` attaches what was delivered as the partial.
                        st.queue.push_back(Err(timeout_base()));
                    } else {
                        st.queue.push_back(Ok(Event::Exit(exit)));
                    }
                }
                Some(Ok(ExecEvent::Error(e))) => {
                    st.done = true;
                    let h = st.held.take();
                    if !h.is_empty() {
                        st.queue.push_back(Ok(Event::Stderr(h)));
                    }
                    st.queue.push_back(Err(stream_error(&e)));
                }
                Some(Ok(ExecEvent::Other(_))) => {}
                Some(Err(e)) => {
                    st.done = true;
                    let h = st.held.take();
                    if !h.is_empty() {
                        st.queue.push_back(Ok(Event::Stderr(h)));
                    }
                    st.queue.push_back(Err(e));
                }
                None => {
                    st.done = true;
                    let h = st.held.take();
                    if !h.is_empty() {
                        st.queue.push_back(Ok(Event::Stderr(h)));
                    }
                    st.queue.push_back(Err(protocol(
                        "the exec stream ended without an exit event",
                        "exec",
                        Stage::After,
                    )));
                }
            }
        }
    })
}

impl Exec for CloudflareExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: CloudflareExec::capabilities_of(self.config()),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
            execseam_adapter_kit::size::check_size(PROVIDER, &command, &crate::SIZE_LIMIT)?;
            self.not_destroyed("exec")?;
            match self.config().output_mode() {
                OutputMode::Streaming => self.stream_mode(command).await?.collect().await,
                OutputMode::Exact => self.exact_mode(command).await,
            }
        })
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        match self.config().output_mode() {
            OutputMode::Streaming => Some(self),
            OutputMode::Exact => None,
        }
    }

    /// The adapter kit's spool in the container's `/tmp` over the bridge's exec (the bridge Worker
    /// has no process routes; the container is lost, with its spools, when it sleeps), with
    /// terminals on the bridge's terminal WebSocket (`terminal.rs`).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        crate::terminal::processes(self)
    }
}

execseam_adapter_kit::exec_stream_by!(CloudflareExec: open_stream);

impl CloudflareExec {
    /// The stream of `command` (the streaming output mode only: the exact mode fetches output after the exit).
    async fn open_stream(&self, command: Command) -> Result<EventStream, Error> {
        execseam_adapter_kit::size::check_size(PROVIDER, &command, &crate::SIZE_LIMIT)?;
        self.not_destroyed("exec_stream")?;
        if self.config().output_mode() == OutputMode::Exact {
            return Err(Error::unsupported(
                "the exact output mode fetches output after the exit: it does not stream",
            )
            .with_provider(PROVIDER)
            .with_operation("exec_stream"));
        }
        self.stream_mode(command).await
    }
}

impl Sandbox for CloudflareExec {
    execseam_adapter_kit::sandbox_fields!(id: inner.sandbox_id, ownership: inner.ownership);

    /// `DELETE /v1/sandbox/{id}` (204, also for an id that never had a container).
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.inner.client.delete_sandbox(&self.inner.sandbox_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn connect_retries_only_what_proves_nothing_ran() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let calls = AtomicU32::new(0);
        let r = with_backoff(4, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(Error::new(ErrorKind::Unavailable, "capacity_exceeded")
                        .with_retry(Retry::SAFE))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 2);
        for retry in [Retry::Unsafe, Retry::Never] {
            let calls = AtomicU32::new(0);
            let r: Result<(), Error> = with_backoff(4, || {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { Err(Error::new(ErrorKind::Internal, "x").with_retry(retry)) }
            })
            .await;
            assert!(r.is_err());
            assert_eq!(
                calls.load(Ordering::SeqCst),
                1,
                "{retry:?} is never retried"
            );
        }
        let calls = AtomicU32::new(0);
        let r: Result<(), Error> = with_backoff(3, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Err(Error::new(ErrorKind::Unavailable, "x").with_retry(Retry::SAFE)) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 3, "attempts are bounded");
    }

    #[test]
    fn the_timeout_line_is_recognised_only_with_exit_124() {
        let err = b"partial\nCommand timed out after 500ms\n";
        assert!(timed_out(true, Exit::Code(124), err));
        assert!(!timed_out(false, Exit::Code(124), err));
        assert!(!timed_out(true, Exit::Code(1), err));
        assert!(!timed_out(true, Exit::Code(124), b"my own 124\n"));
        assert!(timed_out(
            true,
            Exit::Code(124),
            b"partialCommand timed out after 500ms\n"
        ));
        assert!(!timed_out(
            true,
            Exit::Code(124),
            b"Command timed out after 500ms, said I\n"
        ));
    }

    #[test]
    fn a_vanished_sandbox_is_not_found() {
        let stderr =
            format!("{WRAPPER_MARK}{VANISHED}: /workspace/.execseam/sandbox-1 is missing\n");
        let e = wrapper_failure(Output::new("", stderr, Exit::Code(125))).unwrap_err();
        assert_eq!((e.kind(), e.retry()), (ErrorKind::NotFound, Retry::Never));
        let stderr = format!("{WRAPPER_MARK}workdir does not exist: /x\n");
        let e = wrapper_failure(Output::new("", stderr, Exit::Code(125))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let stderr = format!("{WRAPPER_MARK}{CAPTURE_FAILED}\n");
        let e = wrapper_failure(Output::new("", stderr, Exit::Code(125))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
    }
}
