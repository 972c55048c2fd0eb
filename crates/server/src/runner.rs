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
    Command, Error, ErrorKind, Event, Exit, ProcessHandle, Processes, Provider, Sandbox,
    SandboxSpec, Signal, StartKey, StartRequest, StreamOffsets, Tool, Waited,
};
use execseam_chrono_contract::wire::{
    self, ExecOutput, ExecuteRequest, Language, OutputType, RetrievedFile,
};
use execseam_tools_protocol::code::{self, CodeRequest};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::store::{Detached, ms};

/// Where Python dependencies are installed, relative to the program's working directory.
const PYTHON_DEPS: &str = ".chrono-deps/python";
/// How long a dependency install may take (Chrono's `DEPENDENCY_INSTALL_TIMEOUT_SECS`; its value
/// is not published: chosen, as in the emulator).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest retrieved file, and all of them together (as in the emulator).
const MAX_FILE_BYTES: u64 = 10 << 20;
const MAX_FILES_BYTES: u64 = 32 << 20;
/// Lists `retrieve_files` (`$@`): per match `KIND\0PATH\0SIZE\0BASE64\0` with KIND `F` (a
/// file), `B` (over `$MAX` bytes), `D` (a directory); `M\0PATTERN\0\0\0` for a pattern that
/// matches nothing. `IFS` empty: a pattern is globbed but never split.
const RETRIEVE: &str = r#"IFS=''
for p in "$@"; do
  n=0
  for f in $p; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    n=1
    if [ -d "$f" ]; then printf 'D\0%s\0\0\0' "$f"; continue; fi
    s=$(wc -c < "$f") || continue
    s=$((s + 0))
    if [ "$s" -gt "$MAX" ]; then printf 'B\0%s\0%s\0\0' "$f" "$s"; continue; fi
    printf 'F\0%s\0%s\0' "$f" "$s"
    base64 < "$f" | tr -d '\n'
    printf '\0'
  done
  [ "$n" = 1 ] || printf 'M\0%s\0\0\0' "$p"
done"#;

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
        // The server owns NYXID_*: a caller's values never reach the program (seed 004).
        let mut env: Vec<(String, String)> = req
            .env
            .iter()
            .filter(|(k, _)| !wire::SERVER_OWNED_ENV.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if req.language == Language::Python && !req.dependencies.is_empty() {
            env.retain(|(k, _)| k != "PYTHONPATH");
            env.push(("PYTHONPATH".into(), PYTHON_DEPS.into()));
        }
        if env.is_empty() {
            return Ok(cmd);
        }
        cmd.into_builder()
            .envs(env)
            .build()
            .map_err(|e| e.message().to_owned())
    }

    /// Installs the request's dependencies in the sandbox, in the program's working directory
    /// (pip into [`PYTHON_DEPS`], on the program's `PYTHONPATH`; npm into `node_modules`, where
    /// `node -e` resolves from). `Err` ends the run: `DependenciesFailed` with the installer's
    /// output (a missing installer too: its exit and message are the log), `TimedOut`-like 124
    /// after [`INSTALL_TIMEOUT`], `CreationFailed` when the adapter failed.
    async fn install(&self, sbx: &dyn Sandbox, req: &ExecuteRequest) -> Result<(), RunEnd> {
        if req.dependencies.is_empty() {
            return Ok(());
        }
        let (installer, mut argv): (&str, Vec<&str>) = match req.language {
            Language::Python => (
                "pip",
                vec![
                    "python3",
                    "-m",
                    "pip",
                    "install",
                    "--no-input",
                    "--disable-pip-version-check",
                    "--no-cache-dir",
                    "--target",
                    PYTHON_DEPS,
                ],
            ),
            Language::Javascript | Language::Typescript => (
                "npm",
                vec![
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--no-package-lock",
                ],
            ),
            Language::Bash => {
                return Err(RunEnd::Invalid(
                    "dependencies: bash has no package manager".into(),
                ));
            }
        };
        // `--`: a dependency is never read as an installer option.
        argv.push("--");
        argv.extend(req.dependencies.iter().map(String::as_str));
        let cmd = Command::new(argv).map_err(|e| RunEnd::Invalid(e.message().to_owned()))?;
        let t = Instant::now();
        let out = match tokio::time::timeout(INSTALL_TIMEOUT, sbx.exec(cmd)).await {
            Ok(Ok(o)) if o.exit.success() => return Ok(()),
            Ok(Ok(o)) => o,
            // The adapter could not start it (no such program): the install failed, and why.
            Ok(Err(e)) if e.kind() == ErrorKind::NotFound => {
                execseam_core::Output::new(Vec::new(), describe(&e).into_bytes(), Exit::Code(127))
            }
            Ok(Err(e)) => return Err(RunEnd::CreationFailed(describe(&e))),
            Err(_) => execseam_core::Output::new(
                Vec::new(),
                format!(
                    "{installer} did not finish within {} s\n",
                    INSTALL_TIMEOUT.as_secs()
                ),
                Exit::Code(124),
            ),
        };
        Err(RunEnd::DependenciesFailed {
            installer: installer.to_owned(),
            output: ExecOutput {
                stdout: capped(&out.stdout, self.max_output),
                stderr: capped(&out.stderr, self.max_output),
                exit_code: exit_code(out.exit),
                execution_time_ms: Some(u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
                display_data: None,
                files: None,
            },
        })
    }

    /// The files `patterns` name, read through the adapter (never a host path): the sandbox's
    /// `sh` expands each pattern in the program's working directory (`*`, `?`, `[…]`; hidden
    /// names only when the pattern names them) and sends each match's kind, size and base64
    /// bytes. One entry per file, sorted by path; a pattern matching nothing is an entry with
    /// `error: "no such file"`; a directory, a file over [`MAX_FILE_BYTES`] or past
    /// [`MAX_FILES_BYTES`] in all has `error` and no `content`.
    async fn retrieve(&self, sbx: &dyn Sandbox, patterns: &[String]) -> Vec<RetrievedFile> {
        let failed = |why: String| {
            vec![RetrievedFile {
                path: String::new(),
                content: None,
                size: None,
                error: Some(why),
            }]
        };
        let mut argv = vec!["sh", "-c", RETRIEVE, "sh"];
        argv.extend(patterns.iter().map(String::as_str));
        let max = MAX_FILE_BYTES.to_string();
        let out = match Command::builder(argv).env("MAX", max.as_str()).build() {
            Ok(cmd) => sbx.exec(cmd).await,
            Err(e) => return failed(e.message().to_owned()),
        };
        let out = match out {
            Ok(o) if o.exit.success() => o,
            Ok(o) => {
                return failed(format!(
                    "listing the files failed: {}",
                    capped(&o.stderr, 400)
                ));
            }
            Err(e) => return failed(describe(&e)),
        };
        let mut found = std::collections::BTreeMap::new();
        let mut missing = Vec::new();
        let mut fields = out.stdout.split(|&b| b == 0);
        while let Some(kind) = fields.next() {
            let (Some(path), Some(size), Some(b64)) = (fields.next(), fields.next(), fields.next())
            else {
                break;
            };
            let path = String::from_utf8_lossy(path).into_owned();
            let size = std::str::from_utf8(size)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            let f = match kind {
                b"F" => RetrievedFile {
                    path,
                    content: Some(String::from_utf8_lossy(b64).into_owned()),
                    size,
                    error: None,
                },
                b"B" => RetrievedFile {
                    path,
                    content: None,
                    size,
                    error: Some(format!("larger than {MAX_FILE_BYTES} bytes")),
                },
                b"D" => RetrievedFile {
                    path,
                    content: None,
                    size: None,
                    error: Some("is a directory".into()),
                },
                _ => {
                    missing.push(RetrievedFile {
                        path,
                        content: None,
                        size: None,
                        error: Some("no such file".into()),
                    });
                    continue;
                }
            };
            found.entry(f.path.clone()).or_insert(f);
        }
        let mut total = 0u64;
        let mut files: Vec<RetrievedFile> = found.into_values().collect();
        for f in &mut files {
            if f.content.is_some() {
                total += f.size.unwrap_or(0);
                if total > MAX_FILES_BYTES {
                    f.content = None;
                    f.error = Some(format!(
                        "the retrieved files exceed {MAX_FILES_BYTES} bytes in all"
                    ));
                }
            }
        }
        files.extend(missing);
        files
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

    /// Kills a detached command (its process group), boundedly; true if it is confirmed not
    /// to run any more.
    async fn kill_detached(&self, p: &dyn Processes, handle: &ProcessHandle) -> bool {
        let kill = async {
            match p.signal(handle, Signal::Kill).await {
                Ok(()) => matches!(p.wait(handle, KILL_WAIT).await, Ok(Waited::Exited(_))),
                // Nothing under the handle: nothing runs.
                Err(e) => e.kind() == ErrorKind::NotFound,
            }
        };
        tokio::time::timeout(KILL_WAIT, kill).await.unwrap_or(false)
    }

    /// Attaches to a detached command and waits for its end, `timeout` (what is left of it)
    /// and `cancel` killing it. An attach that cannot prove the exit is `Uncertain`.
    async fn wait_detached(
        &self,
        p: &dyn Processes,
        handle: &ProcessHandle,
        timeout: Duration,
        cancel: &mut Pin<&mut impl Future<Output = ()>>,
        t: Instant,
    ) -> RunEnd {
        let work = async {
            let mut last = None;
            for attempt in 0..3 {
                let attached = match p.attach(handle, StreamOffsets::ZERO).await {
                    Ok(stream) => stream.collect().await,
                    Err(e) => Err(e),
                };
                match attached {
                    Err(e) if e.kind() == ErrorKind::Unavailable && attempt < 2 => {
                        last = Some(e);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    other => return other,
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
                if self.kill_detached(p, handle).await {
                    RunEnd::TimedOut
                } else {
                    RunEnd::Uncertain("the program exceeded timeout_secs and could not be confirmed killed".into())
                }
            }
            () = cancel.as_mut() => {
                if self.kill_detached(p, handle).await {
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
        let end = match sbx.processes() {
            Some(p) => {
                let ran = Duration::from_millis(
                    u64::try_from(ms(std::time::SystemTime::now()) - d.started_ms).unwrap_or(0),
                );
                let t = Instant::now().checked_sub(ran).unwrap_or_else(Instant::now);
                let end = self
                    .wait_detached(&*p, &handle, timeout, &mut cancel, t)
                    .await;
                if self.shared.is_some() {
                    let _ = p.release(&handle).await;
                }
                end
            }
            None => RunEnd::Uncertain(format!(
                "the {} adapter has no process handles to reattach to a running command",
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
    /// has process handles ([`Processes`]), the program is started detached and `started` gets its [`Detached`]
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
        let install = tokio::select! {
            r = self.install(sbx, req) => r,
            () = cancel.as_mut() => Err(RunEnd::Cancelled),
        };
        if let Err(end) = install {
            return end;
        }
        let end = self
            .run_program(sbx, cmd, timeout, cancel, started, detach, chunks)
            .await;
        match end {
            RunEnd::Exited(mut out) if req.output_type == Some(OutputType::File) => {
                out.files = Some(self.retrieve(sbx, &req.retrieve_files).await);
                RunEnd::Exited(out)
            }
            end => end,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_program<F>(
        &self,
        sbx: &dyn Sandbox,
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
        if detach && let Some(p) = sbx.processes() {
            let key = StartKey::random();
            let handle = p.handle_for(&key);
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
            let end = match p.start(StartRequest::new(key, cmd)).await {
                Ok(_) => self.wait_detached(&*p, &handle, timeout, cancel, t).await,
                Err(e) => {
                    // It may have started all the same: make sure it does not run on.
                    self.kill_detached(&*p, &handle).await;
                    RunEnd::Uncertain(describe(&e))
                }
            };
            if self.shared.is_some() {
                let _ = p.release(&handle).await;
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
