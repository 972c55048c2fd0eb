//! Runs one request through the configured adapter: a sandbox from the lifecycle interface (a
//! fresh one per execution, destroyed after; or one shared sandbox with `--sandbox`), the
//! input files, then the program as the `code` tool's command for its language
//! ([`execseam_core::code::CodeRequest::command`]), with the request's env.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use execseam::{Command, Error, ErrorKind, Event, Exit, Provider, Sandbox, SandboxSpec};
use execseam_chrono::wire::{ExecOutput, ExecuteRequest, Language};
use execseam_core::code::{self, CodeRequest};
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// How a run ended.
#[derive(Debug)]
pub enum RunEnd {
    /// The program exited (any code).
    Exited(ExecOutput),
    /// `timeout_secs` passed; the command was killed.
    TimedOut,
    /// Cancelled; the command was killed.
    Cancelled,
    /// No sandbox could be had.
    CreationFailed(String),
    /// The request cannot run here (a language without its runtime, a bad input file).
    Invalid(String),
    /// The adapter failed after the command may have started.
    Uncertain(String),
}

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

    fn command(req: &ExecuteRequest) -> Result<Command, String> {
        let cmd = CodeRequest::new(language(req.language), req.script.clone())
            .command()
            .map_err(|e| e.message().to_owned())?;
        if req.env.is_empty() {
            return Ok(cmd);
        }
        cmd.into_builder()
            .envs(req.env.iter().map(|(k, v)| (k.clone(), v.clone())))
            .build()
            .map_err(|e| e.message().to_owned())
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

    /// Runs `req` to its end: `timeout` bounds the program; `cancel` resolving kills it.
    /// `started` is called once the program is about to start (after the sandbox and inputs).
    /// With `chunks`, output is forwarded as it comes where the adapter streams.
    pub async fn run(
        &self,
        req: &ExecuteRequest,
        timeout: Duration,
        cancel: impl Future<Output = ()> + Send,
        started: impl Future<Output = bool> + Send,
        chunks: Option<mpsc::UnboundedSender<Chunk>>,
    ) -> RunEnd {
        let cmd = match Runner::command(req) {
            Ok(c) => c,
            Err(m) => return RunEnd::Invalid(m),
        };
        tokio::pin!(cancel);
        let sbx = tokio::select! {
            s = self.sandbox() => match s {
                Ok(s) => s,
                Err(e) => return RunEnd::CreationFailed(describe(&e)),
            },
            () = &mut cancel => return RunEnd::Cancelled,
        };
        let end = self
            .run_in(&*sbx, req, cmd, timeout, &mut cancel, started, chunks)
            .await;
        if self.shared.is_none() {
            let _ = sbx.destroy().await;
        }
        let _ = sbx.close().await;
        end
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_in(
        &self,
        sbx: &dyn Sandbox,
        req: &ExecuteRequest,
        cmd: Command,
        timeout: Duration,
        cancel: &mut Pin<&mut impl Future<Output = ()>>,
        started: impl Future<Output = bool> + Send,
        chunks: Option<mpsc::UnboundedSender<Chunk>>,
    ) -> RunEnd {
        if let Err(end) = self.inputs(sbx, req).await {
            return end;
        }
        if !started.await {
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
                Ok((out, err, exit)) => RunEnd::Exited(ExecOutput {
                    stdout: capped(&out, self.max_output),
                    stderr: capped(&err, self.max_output),
                    exit_code: exit_code(exit),
                    execution_time_ms: Some(u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
                    display_data: None,
                    files: None,
                }),
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
