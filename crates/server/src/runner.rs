//! Runs one request through the configured adapter: a sandbox from the lifecycle interface (a
//! fresh one per execution, destroyed after; or one shared sandbox with `--sandbox`), the
//! input files, then the program as the `code` tool's command for its language
//! ([`execseam_tools_protocol::code::CodeRequest::command`]), with the request's env.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use execseam::{
    Command, Error, ErrorKind, Event, Exit, ProcessHandle, Provider, Reattach, Sandbox,
    SandboxSpec, Tool,
};
use execseam_chrono_contract::wire::{ExecOutput, ExecuteRequest, Language};
use execseam_tools_protocol::code::{self, CodeRequest};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::store::{Detached, ms};

/// How long a kill of a detached command may take before it is given up.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// How a run ended: the contract's (`execseam_chrono_contract::RunEnd`, which the emulator ends
/// its runs with too), and its one mapping to every answer.
pub use execseam_chrono_contract::RunEnd;

/// A chunk of a streamed run.
#[derive(Debug)]
pub enum Chunk {
    /// stdout text.
    Stdout(String),
    /// stderr text.
    Stderr(String),
}

/// Runs requests.
pub struct Runner {
    provider: Box<dyn Provider>,
    shared: Option<String>,
    max_output: usize,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("provider", &self.provider.provider())
            .finish_non_exhaustive()
    }
}

fn language(l: Language) -> code::Language {
    match l {
        Language::Python => code::Language::Python,
        Language::Javascript => code::Language::Javascript,
        Language::Typescript => code::Language::Typescript,
        Language::Bash => code::Language::Bash,
    }
}

/// A message for an adapter error: its kind and the adapter's text (adapters keep secrets out
/// of their errors: handbook rule), never the command.
fn describe(e: &Error) -> String {
    format!("{:?}: {}", e.kind(), e.message())
}

/// Text of at most `cap` bytes, cut on a character boundary.
fn capped(b: &[u8], cap: usize) -> String {
    let s = String::from_utf8_lossy(b);
    if s.len() <= cap {
        return s.into_owned();
    }
    let mut end = cap;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

fn exit_code(e: Exit) -> i32 {
    e.shell_status()
}

impl Runner {
    /// A runner over `provider`.
    pub fn new(
        provider: Box<dyn Provider>,
        shared: Option<String>,
        max_output: usize,
        metrics: Arc<Metrics>,
    ) -> Runner {
        Runner {
            provider,
            shared,
            max_output,
            metrics,
        }
    }

    /// The adapter's name.
    pub fn adapter(&self) -> &str {
        self.provider.provider()
    }

    async fn sandbox(&self) -> Result<Box<dyn Sandbox>, Error> {
        match &self.shared {
            Some(id) => self.provider.connect(id).await,
            None => self.provider.create(SandboxSpec::new()).await,
        }
    }

    /// The program's command: TypeScript compiled here and run on the sandbox's `node`, unless
    /// the adapter serves `code` natively (then it gets the TypeScript).
    fn command(&self, req: &ExecuteRequest) -> Result<Command, String> {
        let language = language(req.language);
        let native = self
            .provider
            .capabilities()
            .native_tools
            .contains(&Tool::CODE);
        let cmd = if language == code::Language::Typescript && !native {
            execseam_typescript::command(&req.script)
        } else {
            CodeRequest::new(language, req.script.clone()).command()
        }
        .map_err(|e| e.message().to_owned())?;
        if req.env.is_empty() {
            return Ok(cmd);
        }
        cmd.into_builder()
            .envs(req.env.iter().map(|(k, v)| (k.clone(), v.clone())))
            .build()
            .map_err(|e| e.message().to_owned())
    }

    /// The end of a program that exited, or `Invalid` when the sandbox has no interpreter for
    /// its language (the launcher's marker, [`code::check_output`]): a missing runtime is
    /// never the program's exit code.
    fn exited(&self, out: Vec<u8>, err: Vec<u8>, exit: Exit, t: Instant) -> RunEnd {
        let output = execseam_core::Output::new(out, err, exit);
        match code::check_output(output) {
            Ok(o) => RunEnd::Exited(ExecOutput {
                stdout: capped(&o.stdout, self.max_output),
                stderr: capped(&o.stderr, self.max_output),
                exit_code: exit_code(o.exit),
                execution_time_ms: Some(u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
                display_data: None,
                files: None,
            }),
            Err(e) => RunEnd::Invalid(format!("{} in this sandbox image", e.message())),
        }
    }

    async fn inputs(&self, sbx: &dyn Sandbox, req: &ExecuteRequest) -> Result<(), RunEnd> {
        for f in &req.input_files {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(f.content.as_bytes())
                .map_err(|_| RunEnd::Invalid("an input file's content is not base64".into()))?;
            let cmd = Command::builder([
                "sh",
                "-c",
                "mkdir -p -- \"$(dirname -- \"$1\")\" && cat > \"$1\"",
                "execseam-input",
                f.path.as_str(),
            ])
            .stdin(bytes)
            .build()
            .map_err(|e| RunEnd::Invalid(e.message().to_owned()))?;
            match sbx.exec(cmd).await {
                Ok(out) if out.exit.success() => {}
                Ok(_) => return Err(RunEnd::Invalid("an input file could not be written".into())),
                Err(e) => return Err(RunEnd::CreationFailed(describe(&e))),
            }
        }
        Ok(())
    }

    /// Kills a detached command through a fresh attach, boundedly; true if confirmed.
    async fn kill_detached(&self, r: &dyn Reattach, handle: &ProcessHandle) -> bool {
        let kill = async {
            match r.attach(handle).await {
                Ok(stream) => stream.kill().await.unwrap_or(false),
                // Nothing to attach to: nothing runs.
                Err(e) => e.kind() == ErrorKind::NotFound,
            }
        };
        tokio::time::timeout(KILL_WAIT, kill).await.unwrap_or(false)
    }

    /// Attaches to a detached command and waits for its end, `timeout` (what is left of it)
    /// and `cancel` killing it. An attach that cannot prove the exit is `Uncertain`.
    async fn wait_detached(
        &self,
        r: &dyn Reattach,
        handle: &ProcessHandle,
        timeout: Duration,
        cancel: &mut Pin<&mut impl Future<Output = ()>>,
        t: Instant,
    ) -> RunEnd {
        let work = async {
            let mut last = None;
            for attempt in 0..3 {
                match r.attach(handle).await {
                    Ok(stream) => return stream.collect().await,
                    Err(e) if e.kind() == ErrorKind::Unavailable && attempt < 2 => {
                        last = Some(e);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(last.unwrap_or_else(|| Error::new(ErrorKind::Unavailable, "attach failed")))
        };
        tokio::select! {
            r = work => match r {
                Ok(o) => self.exited(o.stdout.to_vec(), o.stderr.to_vec(), o.exit, t),
                Err(e) => RunEnd::Uncertain(format!(
                    "the command's outcome cannot be proven: {}",
                    describe(&e)
                )),
            },
            () = tokio::time::sleep(timeout) => {
                if self.kill_detached(r, handle).await {
                    RunEnd::TimedOut
                } else {
                    RunEnd::Uncertain("the program exceeded timeout_secs and could not be confirmed killed".into())
                }
            }
            () = cancel.as_mut() => {
                if self.kill_detached(r, handle).await {
                    RunEnd::Cancelled
                } else {
                    RunEnd::Uncertain("cancelled, but the program could not be confirmed killed".into())
                }
            }
        }
    }

    /// Finishes a command another process started detached (a crash, a replica lost): connects
    /// to its sandbox, attaches under its handle and waits for its end; `timeout` is what is
    /// left of the operation's. Anything that cannot prove the exit is `Uncertain`. The
    /// sandbox is destroyed after (unless it is the shared `--sandbox`).
    pub async fn resume<H>(
        &self,
        d: &Detached,
        timeout: Duration,
        cancel: impl Future<Output = ()> + Send,
        finished: impl FnOnce(RunEnd) -> H + Send,
    ) -> RunEnd
    where
        H: Future<Output = ()> + Send,
    {
        tokio::pin!(cancel);
        let sbx = match self.provider.connect(&d.sandbox_id).await {
            Ok(s) => s,
            Err(e) => {
                let end = RunEnd::Uncertain(format!(
                    "cannot reach the sandbox of the running command: {}",
                    describe(&e)
                ));
                finished(end.clone()).await;
                return end;
            }
        };
        let handle = ProcessHandle::new(d.handle.clone());
        let end = match sbx.reattach() {
            Some(r) => {
                let ran = Duration::from_millis(
                    u64::try_from(ms(std::time::SystemTime::now()) - d.started_ms).unwrap_or(0),
                );
                let t = Instant::now().checked_sub(ran).unwrap_or_else(Instant::now);
                let end = self
                    .wait_detached(r, &handle, timeout, &mut cancel, t)
                    .await;
                if self.shared.is_some() {
                    let _ = r.release(&handle).await;
                }
                end
            }
            None => RunEnd::Uncertain(format!(
                "the {} adapter cannot reattach to a running command",
                self.adapter()
            )),
        };
        finished(end.clone()).await;
        if self.shared.is_none() {
            let _ = sbx.destroy().await;
        }
        let _ = sbx.close().await;
        end
    }

    /// Runs `req` to its end: `timeout` bounds the program; `cancel` resolving kills it.
    /// `started` is called once the program is about to start (after the sandbox and inputs);
    /// it returns false when the program must not start. With `detach` and an adapter that
    /// has [`Reattach`], the program is started detached and `started` gets its [`Detached`]
    /// (to store before the start); otherwise it gets `None`. With `chunks`, output is
    /// forwarded as it comes where the adapter streams (never detached).
    #[allow(clippy::too_many_arguments)]
    pub async fn run<F, H>(
        &self,
        req: &ExecuteRequest,
        timeout: Duration,
        cancel: impl Future<Output = ()> + Send,
        started: impl FnOnce(Option<Detached>) -> F + Send,
        finished: impl FnOnce(RunEnd) -> H + Send,
        detach: bool,
        chunks: Option<mpsc::UnboundedSender<Chunk>>,
    ) -> RunEnd
    where
        F: Future<Output = bool> + Send,
        H: Future<Output = ()> + Send,
    {
        let (end, sbx) = self
            .run_to_end(req, timeout, cancel, started, detach, chunks)
            .await;
        // The end is stored before the sandbox goes: a crash in between leaves a result, not
        // a handle to a destroyed sandbox.
        finished(end.clone()).await;
        if let Some(sbx) = sbx {
            if self.shared.is_none() {
                let _ = sbx.destroy().await;
            }
            let _ = sbx.close().await;
        }
        end
    }

    async fn run_to_end<F>(
        &self,
        req: &ExecuteRequest,
        timeout: Duration,
        cancel: impl Future<Output = ()> + Send,
        started: impl FnOnce(Option<Detached>) -> F + Send,
        detach: bool,
        chunks: Option<mpsc::UnboundedSender<Chunk>>,
    ) -> (RunEnd, Option<Box<dyn Sandbox>>)
    where
        F: Future<Output = bool> + Send,
    {
        let cmd = match self.command(req) {
            Ok(c) => c,
            Err(m) => return (RunEnd::Invalid(m), None),
        };
        tokio::pin!(cancel);
        let sbx = tokio::select! {
            s = self.sandbox() => match s {
                Ok(s) => s,
                Err(e) => return (RunEnd::CreationFailed(describe(&e)), None),
            },
            () = &mut cancel => return (RunEnd::Cancelled, None),
        };
        let end = self
            .run_in(
                &*sbx,
                req,
                cmd,
                timeout,
                &mut cancel,
                started,
                detach && chunks.is_none(),
                chunks,
            )
            .await;
        (end, Some(sbx))
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_in<F>(
        &self,
        sbx: &dyn Sandbox,
        req: &ExecuteRequest,
        cmd: Command,
        timeout: Duration,
        cancel: &mut Pin<&mut impl Future<Output = ()>>,
        started: impl FnOnce(Option<Detached>) -> F + Send,
        detach: bool,
        chunks: Option<mpsc::UnboundedSender<Chunk>>,
    ) -> RunEnd
    where
        F: Future<Output = bool> + Send,
    {
        if let Err(end) = self.inputs(sbx, req).await {
            return end;
        }
        if detach && let Some(r) = sbx.reattach() {
            let handle = r.new_handle();
            let d = Detached {
                sandbox_id: sbx.id().to_owned(),
                handle: handle.as_str().to_owned(),
                started_ms: ms(std::time::SystemTime::now()),
            };
            // The handle is stored before the start: a crash from here on leaves a handle
            // (attach then finds the command, or proves nothing and the outcome is uncertain).
            if !started(Some(d)).await {
                return RunEnd::Cancelled;
            }
            self.metrics
                .executions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let t = Instant::now();
            let end = match r.start(&handle, cmd).await {
                Ok(()) => self.wait_detached(r, &handle, timeout, cancel, t).await,
                Err(e) => {
                    // It may have started all the same: make sure it does not run on.
                    self.kill_detached(r, &handle).await;
                    RunEnd::Uncertain(describe(&e))
                }
            };
            if self.shared.is_some() {
                let _ = r.release(&handle).await;
            }
            self.metrics.exec_latency.observe(t.elapsed());
            return end;
        }
        if !started(None).await {
            // The operation is no longer ours (a cancel or a reconcile got there first).
            return RunEnd::Cancelled;
        }
        self.metrics
            .executions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = Instant::now();
        let work = async {
            match (chunks, sbx.streaming()) {
                (Some(tx), Some(streaming)) => {
                    let mut events = streaming.exec_stream(cmd).await?;
                    let (mut out, mut err) = (Vec::new(), Vec::new());
                    while let Some(ev) = events.next().await {
                        match ev? {
                            Event::Stdout(b) => {
                                let _ = tx.send(Chunk::Stdout(String::from_utf8_lossy(&b).into()));
                                out.extend_from_slice(&b);
                            }
                            Event::Stderr(b) => {
                                let _ = tx.send(Chunk::Stderr(String::from_utf8_lossy(&b).into()));
                                err.extend_from_slice(&b);
                            }
                            Event::Exit(x) => return Ok((out, err, x)),
                        }
                    }
                    Err(Error::new(
                        ErrorKind::Protocol,
                        "the event stream ended without an exit",
                    ))
                }
                (tx, _) => {
                    let o = sbx.exec(cmd).await?;
                    if let Some(tx) = tx {
                        let _ = tx.send(Chunk::Stdout(String::from_utf8_lossy(&o.stdout).into()));
                        let _ = tx.send(Chunk::Stderr(String::from_utf8_lossy(&o.stderr).into()));
                    }
                    Ok((o.stdout.to_vec(), o.stderr.to_vec(), o.exit))
                }
            }
        };
        let end = tokio::select! {
            r = work => match r {
                Ok((out, err, exit)) => self.exited(out, err, exit, t),
                Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::InvalidCommand => {
                    RunEnd::Invalid(describe(&e))
                }
                Err(e) => RunEnd::Uncertain(describe(&e)),
            },
            () = tokio::time::sleep(timeout) => RunEnd::TimedOut,
            () = cancel.as_mut() => RunEnd::Cancelled,
        };
        self.metrics.exec_latency.observe(t.elapsed());
        end
    }
}
