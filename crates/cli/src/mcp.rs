//! `execseam mcp`: the builtin tools as a Model Context Protocol server over stdio, on one sandbox.
//!
//! The sandbox is chosen through the facade's registry (`--adapter`), attached with `--sandbox ID`
//! (left running) or created at start from `--image`/`--label`/`--env` and destroyed at exit:
//! when the client closes stdin, on SIGINT and on SIGTERM. stdout carries only the protocol;
//! diagnostics go to stderr (`RUST_LOG`).
//!
//! Every tool takes typed arguments whose JSON Schema the client sees in `tools/list`; missing,
//! unknown or mistyped arguments are a tool error (`isError: true`, "failed to deserialize
//! parameters: …"), as rmcp reports them and as the MCP spec asks for input validation errors
//! (so the model can correct itself), never a crash; inconsistent ones (both `script` and
//! `argv`) are the tool error `invalid-argument`. A tool's own
//! failure (a missing file, a patch that does not apply, an infrastructure error with its kind
//! and retry class) is a tool result with `isError: true` and the error as structured content
//! (`execseam_tools::wire`). A command's non-zero exit is a normal result. Output limits are
//! stated in every result (`truncated` bytes, `omitted` items).
//!
//! Background commands (issue 34; the shape of Claude Code's background shell and its output and
//! kill tools): `bash` with `run_in_background` starts the command through the sandbox's process
//! handles (`Exec::processes`) and answers its handle as `id`; `bash_output` reads what was
//! written since the last read (the server keeps one cursor per id; explicit offsets override
//! it, so a client that restarted the server resumes exactly), `bash_stdin` appends to its stdin
//! at the count accepted so far, `bash_kill` signals its process group, `bash_release` forgets an
//! ended one (`bash_output`'s `block` first waits for the end, as Claude Code's `TaskOutput`, or
//! with `block_until: "output"` for the first new output). An adapter without handles answers
//! the typed `unsupported` error.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use execseam::{Command, Error, Exec, Output, SandboxSpec, Tool};
use execseam_core::{
    ProcessEvent, ProcessHandle, ProcessState, Processes, Signal, StartKey, StartRequest,
    StdinWrite, StreamOffsets, Waited,
};
use execseam_layers::ExecExt;
use execseam_tools::{
    GrepOptions, Language, ReadRange, ToolError, Tools, WriteOptions, normalize_absolute,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::registry;
use crate::run::USAGE;
use crate::sandbox::pairs;

#[derive(Args)]
pub struct McpArgs {
    /// The adapter.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// Attach to this existing sandbox (left running at exit); without it a sandbox is created
    /// at start and destroyed at exit.
    #[arg(long, env = "EXECSEAM_SANDBOX")]
    sandbox: Option<String>,
    /// The image, template or snapshot of the sandbox created at start.
    #[arg(long, conflicts_with = "sandbox")]
    image: Option<String>,
    /// A label of the sandbox created at start, KEY=VALUE (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", conflicts_with = "sandbox")]
    labels: Vec<String>,
    /// A sandbox-wide environment variable of the sandbox created at start, KEY=VALUE
    /// (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", conflicts_with = "sandbox")]
    env: Vec<String>,
    /// The absolute directory relative tool paths are resolved against (default: the current
    /// directory for the local adapter, `/` otherwise).
    #[arg(long, value_name = "DIR")]
    root: Option<String>,
    /// At most this many bytes of each text a tool returns (stdout, stderr, a file's content);
    /// the rest is dropped and the count stated in the result.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024)]
    max_output: usize,
    /// Hold every tool to the root: a path outside it, or reached through a symlink below it,
    /// is refused (`outside-root`), as `apply_patch` always is; bash runs in it (a `workdir`
    /// must be below it). What a command then does is not confined.
    #[arg(long)]
    confine: bool,
    /// The largest request line over stdio, in bytes; a longer one is answered with a JSON-RPC
    /// error naming this limit.
    #[arg(long, value_name = "BYTES", default_value_t = crate::mcp_stdio::DEFAULT_MAX_REQUEST)]
    max_request: usize,
    /// Serve streamable HTTP at http://ADDR/mcp (loopback names only are accepted as Host)
    /// instead of stdio, until SIGINT or SIGTERM; the one sandbox is shared by every session.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
}

/// Runs the server until the client goes away or a signal arrives; the sandbox this run created
/// is destroyed when serving ends (`registry::close`).
pub async fn mcp(a: McpArgs) -> ExitCode {
    let spec = (|| -> Result<SandboxSpec, String> {
        let mut spec = SandboxSpec::new();
        if let Some(i) = &a.image {
            spec = spec.with_image(i.clone());
        }
        for (k, v) in pairs("label", &a.labels)? {
            spec = spec.with_label(k, v);
        }
        for (k, v) in pairs("env", &a.env)? {
            spec = spec.with_env(k, v);
        }
        Ok(spec)
    })();
    let spec = match spec {
        Ok(s) => s,
        Err(m) => {
            eprintln!("execseam: {m}");
            return ExitCode::from(USAGE);
        }
    };
    let root = match &a.root {
        Some(r) => r.clone(),
        None if a.adapter == "local" => match std::env::current_dir() {
            Ok(d) => d.to_string_lossy().into_owned(),
            Err(e) => {
                eprintln!("execseam: the current directory: {e}");
                return ExitCode::from(USAGE);
            }
        },
        None => "/".to_owned(),
    };
    let root = match normalize_absolute("--root", &root) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("execseam: {e}");
            return ExitCode::from(USAGE);
        }
    };
    // Listening before the create: a signal while its answer is in flight must reach the
    // kit's guard, which destroys the sandbox when it arrives (issue 38, D17), not kill us.
    let mut signals = crate::run::Signals::listen();
    let sandbox = tokio::select! {
        s = registry::open_with(&a.adapter, a.sandbox.as_deref(), spec) => match s {
            Ok(s) => s,
            Err(e) => {
                eprintln!("execseam: {e}");
                return crate::run::error_status(&e);
            }
        },
        sig = signals.recv() => return crate::run::interrupted_exit(sig, None).await,
    };
    let server = McpServer::new(sandbox.clone(), root.clone(), a.max_output).confined(a.confine);
    let code = match a.http {
        Some(addr) => serve_http(server, addr, &mut signals).await,
        None => serve_stdio(server, &a.adapter, &root, a.max_request, &mut signals).await,
    };
    // A sandbox this run created is destroyed; one it connected to is left running.
    registry::close(&*sandbox).await;
    code
}

/// MCP over stdio until the client closes the connection or SIGINT/SIGTERM.
async fn serve_stdio(
    server: McpServer,
    adapter: &str,
    root: &str,
    max_request: usize,
    signals: &mut crate::run::Signals,
) -> ExitCode {
    tracing::info!(adapter = %adapter, root = %root, "mcp: serving on stdio");
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let transport = crate::mcp_stdio::transport(stdin, stdout, max_request);
    let running = match server.serve(transport).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("execseam: mcp: the client did not initialize: {e}");
            return ExitCode::from(1);
        }
    };
    let token = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let code = tokio::select! {
        r = &mut waiting => {
            tracing::info!(reason = ?r.as_ref().ok(), "mcp: the client closed the connection");
            ExitCode::SUCCESS
        }
        s = signals.recv() => {
            tracing::info!(status = s, "mcp: interrupted");
            token.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
            ExitCode::from(s)
        }
    };
    code
}

/// Streamable HTTP at `/mcp` until SIGINT/SIGTERM; prints the URL on stdout.
async fn serve_http(
    server: McpServer,
    addr: std::net::SocketAddr,
    signals: &mut crate::run::Signals,
) -> ExitCode {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let ct = tokio_util::sync::CancellationToken::new();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_cancellation_token(ct.child_token()),
    );
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("execseam: mcp: cannot listen on {addr}: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let local = listener.local_addr().map_or(addr, |a| a);
    println!("http://{local}/mcp");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    tracing::info!(%local, "mcp: serving streamable HTTP");
    let router = axum::Router::new().nest_service("/mcp", service);
    let stop = ct.clone();
    let served = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await
    });
    let s = signals.recv().await;
    tracing::info!(status = s, "mcp: interrupted");
    ct.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), served).await;
    ExitCode::from(s)
}

/// The server: the tools over one sandbox.
#[derive(Clone)]
pub struct McpServer {
    exec: Arc<dyn Exec>,
    root: String,
    max_output: usize,
    confine: bool,
    /// Where the last `bash_output` of each background command ended (by handle).
    cursors: Arc<Mutex<HashMap<String, StreamOffsets>>>,
    /// Unified exec's sessions (`exec_command`, `write_stdin`).
    sessions: Arc<crate::unified_exec::Sessions>,
    #[allow(dead_code)] // read by the code #[tool_handler] generates
    tool_router: ToolRouter<McpServer>,
}

/// `bash`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// A shell script, run with `bash -c` (or `sh -c` where the sandbox has no bash). Give this
    /// or `argv`, not both.
    #[serde(default)]
    pub script: Option<String>,
    /// The program and its arguments, run exactly as given (no shell). Give this or `script`.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// The working directory (absolute, or relative to the server's root; default: the root).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Environment variables for this command.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Text to feed the command's stdin.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Seconds before the command is killed, 1..=600 (default 120). Not with
    /// `run_in_background`.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Start the command detached and return its `id` at once; read its output with
    /// `bash_output`, write its stdin with `bash_stdin`, end it with `bash_kill`.
    #[serde(default)]
    pub run_in_background: Option<bool>,
    /// With `run_in_background`: keep stdin open for `bash_stdin` (otherwise the command reads
    /// `stdin`, if given, then end of file).
    #[serde(default)]
    pub keep_stdin_open: Option<bool>,
}

/// `bash_output`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashOutputArgs {
    /// The `id` that `bash` returned with `run_in_background`.
    pub id: String,
    /// Read stdout from this byte offset (default: where this server's last read of `id` ended).
    #[serde(default)]
    pub stdout_from: Option<u64>,
    /// Read stderr from this byte offset (default: where the last read ended).
    #[serde(default)]
    pub stderr_from: Option<u64>,
    /// Wait for the command to end (up to `timeout_ms`) before reading (default false: answer
    /// at once).
    #[serde(default)]
    pub block: Option<bool>,
    /// With `block`: the longest wait in milliseconds, 0..=600000 (default 30000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// With `block`: what ends the wait: `exit` (default: the command's end) or `output` (the
    /// first output past the read's offsets, or the end).
    #[serde(default)]
    pub block_until: Option<BlockUntil>,
    /// A regular expression: only the whole lines that match it are returned; the read still
    /// moves past the others, so the next default read does not show them again (they stay
    /// readable from their offsets). While the command runs, a last line without its newline
    /// waits for the next read.
    #[serde(default)]
    pub filter: Option<String>,
}

/// What ends `bash_output`'s `block`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BlockUntil {
    /// The command's end.
    #[default]
    Exit,
    /// New output on either stream, or the end.
    Output,
}

/// `bash_release`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashReleaseArgs {
    /// The `id` of a background command that has ended.
    pub id: String,
}

/// `bash_stdin`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashStdinArgs {
    /// The `id` of a background command started with `keep_stdin_open`.
    pub id: String,
    /// Text to append to its stdin.
    #[serde(default)]
    pub data: String,
    /// Close its stdin after `data` (the command then reads end of file).
    #[serde(default)]
    pub close: Option<bool>,
}

/// `bash_kill`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashKillArgs {
    /// The `id` of a background command.
    pub id: String,
    /// The signal, to the command's whole process group: TERM (default), KILL, INT, HUP, QUIT,
    /// USR1, USR2, by name or number.
    #[serde(default)]
    pub signal: Option<String>,
}

/// `read`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file (absolute, or relative to the server's root).
    pub path: String,
    /// The first line to return, 1-based (default 1).
    #[serde(default)]
    pub offset: Option<u64>,
    /// How many lines at most (default: to the end, within the output limit).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `write`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file (absolute, or relative to the server's root). It is replaced atomically.
    pub path: String,
    /// The whole new content.
    pub content: String,
    /// Create missing parent directories (default true); false fails on a missing directory.
    #[serde(default)]
    pub create_parents: Option<bool>,
}

/// `edit`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file (absolute, or relative to the server's root).
    pub path: String,
    /// The exact text to replace (whitespace and newlines included). It must occur exactly
    /// once unless `replace_all` is true.
    pub old: String,
    /// The replacement text.
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// `glob`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// The glob, relative to `dir`: `*`, `?`, `[a-z]`, `{a,b}`, `**` for any depth
    /// (`src/**/*.rs`).
    pub pattern: String,
    /// The directory to search (default: the server's root).
    #[serde(default)]
    pub dir: Option<String>,
    /// At most this many paths (default 1000); the rest are counted in `omitted`.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `grep`'s output mode.
#[derive(Debug, Default, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrepMode {
    /// Matching lines with their line numbers (and context lines if asked).
    #[default]
    Content,
    /// Only the paths of files with a match.
    Files,
    /// How many lines match in each file.
    Count,
}

/// `grep`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A POSIX extended regular expression (`grep -E`), or a plain string with `fixed`.
    pub pattern: String,
    /// The directory to search (default: the server's root).
    #[serde(default)]
    pub dir: Option<String>,
    /// Only files matching this glob (without `/`: the file name at any depth, as `*.rs`).
    #[serde(default)]
    pub glob: Option<String>,
    /// The pattern is a plain string, not a regular expression.
    #[serde(default)]
    pub fixed: bool,
    /// ASCII case-insensitive matching.
    #[serde(default)]
    pub ignore_case: bool,
    /// Lines of context before each match (content mode).
    #[serde(default)]
    pub before: usize,
    /// Lines of context after each match (content mode).
    #[serde(default)]
    pub after: usize,
    /// `content` (default), `files` or `count`.
    #[serde(default)]
    pub mode: GrepMode,
    /// At most this many matches (content) or files (files, count); default 200.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `list`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The directory (default: the server's root).
    #[serde(default)]
    pub dir: Option<String>,
    /// How many levels below it, 1 = its children (default 1).
    #[serde(default)]
    pub depth: Option<u32>,
    /// At most this many entries (default 1000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `apply_patch`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchArgs {
    /// A unified diff (`--- a/x` / `+++ b/x` / `@@ … @@`) or the `*** Begin Patch` format
    /// (`*** Add File:`, `*** Update File:`, `*** Delete File:`, `*** End Patch`). All of it
    /// applies or nothing is written.
    pub patch: String,
    /// The directory the patch's paths are relative to (default: the server's root).
    #[serde(default)]
    pub dir: Option<String>,
}

/// `code`'s language.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodeLanguage {
    /// `python3 -c`.
    Python,
    /// `node -e`.
    Javascript,
    /// Types stripped on the host, then `node -e`.
    Typescript,
    /// `bash -c`.
    Bash,
}

/// `code`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeArgs {
    /// The language of `source`.
    pub language: CodeLanguage,
    /// The program, run exactly as given.
    pub source: String,
    /// Seconds, 1..=600 (default 180).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// A tool-level failure as the client sees it: `isError` with the error as structured content.
fn tool_error(e: &ToolError) -> CallToolResult {
    tracing::debug!(
        code = e.code(),
        retry = e.retry().class(),
        "mcp: tool error"
    );
    CallToolResult::structured_error(json!({ "error": e }))
}

fn ok(v: Value) -> CallToolResult {
    CallToolResult::structured(v)
}

/// At most `max` bytes of `b` (cut at a character boundary when it is text), and how many were
/// dropped.
/// Waits up to `within` for `handle`'s first output past `from`, or its end: an attach from
/// `from` that stops at its first non-empty chunk or the exit.
async fn first_output(
    p: &dyn Processes,
    handle: &ProcessHandle,
    from: StreamOffsets,
    within: Duration,
) -> Result<(), Error> {
    let first = async {
        let mut s = p.attach(handle, from).await?;
        while let Some(ev) = s.next().await {
            match ev? {
                ProcessEvent::Stdout { data, .. } | ProcessEvent::Stderr { data, .. }
                    if data.is_empty() => {}
                _ => return Ok(()),
            }
        }
        Ok(())
    };
    tokio::time::timeout(within, first).await.unwrap_or(Ok(()))
}

fn capped(b: &[u8], max: usize) -> (&[u8], usize) {
    if b.len() <= max {
        return (b, 0);
    }
    let mut end = max;
    while end > 0 && std::str::from_utf8(&b[..end]).is_err() && max - end < 4 {
        end -= 1;
    }
    if std::str::from_utf8(&b[..end]).is_err() {
        end = max;
    }
    (&b[..end], b.len() - end)
}

/// The longest compiled `filter` (the regex crate's own default is 10 MiB).
const FILTER_SIZE_LIMIT: usize = 1 << 20;

/// `bash_output`'s `filter`, checked before any read: a bad pattern is an invalid argument.
fn line_filter(pattern: &str) -> Result<regex::bytes::Regex, ToolError> {
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(FILTER_SIZE_LIMIT)
        .build()
        .map_err(|e| ToolError::InvalidArgument {
            message: format!("filter: {e}"),
        })
}

/// The lines of `chunk` that `filter` matches (each with its newline), and how many bytes of
/// `chunk` the read consumed. Claude Code's BashOutput `filter` works on lines ("Only lines
/// matching this regex will be included in the result. Any lines that do not match will no
/// longer be available to read": its published tool schema), so a line is only judged whole:
/// a last line without its newline is left for the next read unless `last` (nothing follows
/// it: the command ended and the read reached its end) or the chunk is one line cut at the
/// output limit (`cut`: it would never grow a newline within one read).
fn keep_lines(
    chunk: &[u8],
    filter: &regex::bytes::Regex,
    last: bool,
    cut: bool,
) -> (Vec<u8>, usize) {
    let whole = match chunk.iter().rposition(|&b| b == b'\n') {
        _ if last => chunk.len(),
        Some(i) => i + 1,
        None if cut => chunk.len(),
        None => 0,
    };
    let mut kept = Vec::new();
    for line in chunk[..whole].split_inclusive(|&b| b == b'\n') {
        let bare = line.strip_suffix(b"\n").unwrap_or(line);
        if filter.is_match(bare.strip_suffix(b"\r").unwrap_or(bare)) {
            kept.extend_from_slice(line);
        }
    }
    (kept, whole)
}

/// A text field: the string when UTF-8, else `{"base64": …}`.
fn text(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => json!({ "base64": execseam_adapter_kit::degrade::base64_encode(b) }),
    }
}

impl McpServer {
    /// The server over `exec`, resolving relative paths against `root`.
    pub fn new(exec: Arc<dyn Exec>, root: String, max_output: usize) -> McpServer {
        McpServer {
            exec,
            root,
            max_output,
            confine: false,
            cursors: Arc::default(),
            sessions: Arc::default(),
            tool_router: Self::tool_router(),
        }
    }

    /// With `confine`, every tool is held to the root ([`Tools::confined`]).
    #[must_use]
    pub fn confined(mut self, confine: bool) -> McpServer {
        self.confine = confine;
        self
    }

    fn tools(&self) -> Tools<'_> {
        let t = Tools::new(&*self.exec);
        if self.confine {
            t.confined(&self.root)
        } else {
            t
        }
    }

    fn path(&self, p: Option<&str>) -> String {
        match p {
            None | Some("") | Some(".") => self.root.clone(),
            Some(p) if p.starts_with('/') => p.to_owned(),
            Some(p) if self.root == "/" => format!("/{p}"),
            Some(p) => format!("{}/{p}", self.root),
        }
    }

    /// The sandbox's process handles, or the typed `unsupported` tool error.
    fn processes(&self) -> Result<Box<dyn Processes + '_>, CallToolResult> {
        self.exec.processes().ok_or_else(|| {
            tool_error(&ToolError::Exec(
                Error::unsupported(
                    "this sandbox's adapter has no process handles (Capabilities::processes): \
                     run the command in the foreground",
                )
                .with_provider(self.exec.provider().to_owned())
                .with_operation("start"),
            ))
        })
    }

    /// `bash` with `run_in_background`: a detached start under a fresh key.
    async fn background(&self, cmd: Command, open_stdin: bool) -> CallToolResult {
        let p = match self.processes() {
            Ok(p) => p,
            Err(e) => return e,
        };
        let mut request = StartRequest::new(StartKey::random(), cmd);
        if open_stdin {
            request = request.open_stdin();
        }
        match p.start(request).await {
            Ok(started) => {
                let id = started.handle.as_str().to_owned();
                self.cursors
                    .lock()
                    .expect("cursors")
                    .insert(id.clone(), StreamOffsets::default());
                ok(json!({ "id": id, "state": "running", "stdin_open": open_stdin }))
            }
            Err(e) => tool_error(&ToolError::Exec(e)),
        }
    }

    fn output(&self, o: &Output) -> Value {
        let (out, out_dropped) = capped(&o.stdout, self.max_output);
        let (err, err_dropped) = capped(&o.stderr, self.max_output);
        json!({
            "exit": o.exit,
            "ambiguous_kill": o.exit.is_ambiguous_kill(),
            "stdout": text(out),
            "stderr": text(err),
            "truncated": {
                "stdout": o.truncated.stdout + out_dropped as u64,
                "stderr": o.truncated.stderr + err_dropped as u64,
            },
        })
    }
}

#[tool_router]
impl McpServer {
    #[tool(
        description = "Run a command in the sandbox: a shell `script` (bash, or sh where bash is missing) or an exact `argv`. Returns stdout, stderr and the exit status separately; a non-zero exit is a normal result, not an error. An infrastructure failure is an error with its `kind` and `retry` class. Output beyond the server's limit is dropped and counted in `truncated`. With `run_in_background` the command starts detached and the answer is its `id` at once: read its output with `bash_output`, write its stdin with `bash_stdin` (with `keep_stdin_open`), end it with `bash_kill`; it keeps running between calls and its exit is never lost."
    )]
    async fn bash(&self, Parameters(a): Parameters<BashArgs>) -> Result<CallToolResult, ErrorData> {
        let mut b = match (&a.script, &a.argv) {
            (Some(s), None) => Command::builder([
                "sh",
                "-c",
                "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; fi; exec sh -c \"$1\"",
                "execseam-bash",
                s,
            ]),
            (None, Some(argv)) if !argv.is_empty() => Command::builder(argv.clone()),
            _ => {
                return Ok(tool_error(&ToolError::InvalidArgument {
                    message: "give exactly one of `script` and a non-empty `argv`".into(),
                }));
            }
        }
        .tool(Tool::BASH);
        let workdir = self.path(a.workdir.as_deref());
        if self.confine
            && let Err(e) = self.tools().check_beneath(Tool::BASH, &workdir).await
        {
            return Ok(tool_error(&e));
        }
        b = b.workdir(workdir);
        for (k, v) in a.env.iter().flatten() {
            b = b.env(k, v);
        }
        if let Some(s) = &a.stdin {
            b = b.stdin(Bytes::from(s.clone().into_bytes()));
        }
        if a.run_in_background == Some(true) {
            if a.timeout_secs.is_some() {
                return Ok(tool_error(&ToolError::InvalidArgument {
                    message: "timeout_secs does not apply to a background command (end it with bash_kill)".into(),
                }));
            }
            return Ok(match b.build() {
                Ok(cmd) => self.background(cmd, a.keep_stdin_open == Some(true)).await,
                Err(e) => tool_error(&ToolError::Exec(e)),
            });
        }
        if a.keep_stdin_open.is_some() {
            return Ok(tool_error(&ToolError::InvalidArgument {
                message: "keep_stdin_open needs run_in_background".into(),
            }));
        }
        let timeout = a.timeout_secs.unwrap_or(120);
        if !(1..=600).contains(&timeout) {
            return Ok(tool_error(&ToolError::InvalidArgument {
                message: format!("timeout_secs {timeout} is outside 1..=600"),
            }));
        }
        let cmd = match b.build() {
            Ok(c) => c,
            Err(e) => return Ok(tool_error(&ToolError::Exec(e))),
        };
        let timeout = Duration::from_secs(timeout);
        // The layer's deadline reaches the adapter (a provider with a per-exec timeout of its
        // own kills the command there: issue 38, D29).
        let r = (&*self.exec).with_deadline(timeout).exec(cmd).await;
        Ok(match r {
            Ok(o) => ok(self.output(&o)),
            Err(e) => tool_error(&ToolError::Exec(e)),
        })
    }

    #[tool(
        description = "Runs a command in a PTY (`tty: true`) or on plain pipes, returning output or a session ID for ongoing interaction (Codex's unified exec). Waits up to `yield_time_ms` (default 10000) and returns what the command printed, with `exit_code` if it ended or `session_id` if it still runs (continue with write_stdin); `handle` is the durable process handle. Output beyond `max_output_tokens` is cut from the middle and counted in `dropped_bytes`; without a PTY stderr comes apart in `stderr`."
    )]
    async fn exec_command(
        &self,
        Parameters(a): Parameters<crate::unified_exec::ExecCommandArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let workdir = self.path(a.workdir.as_deref());
        if self.confine
            && let Err(e) = self.tools().check_beneath(Tool::BASH, &workdir).await
        {
            return Ok(tool_error(&e));
        }
        Ok(
            match self.sessions.exec_command(&*self.exec, a, workdir).await {
                Ok(v) => ok(v),
                Err(e) => tool_error(&e),
            },
        )
    }

    #[tool(
        description = "Writes characters to an existing unified exec session and returns recent output (empty `chars`: only poll, waiting at least 5000 ms). Control characters are keys on a PTY: \\u0003 (JSON) is Ctrl-C, \\u0004 Ctrl-D. Returns `exit_code` once the session ended, else `session_id` again."
    )]
    async fn write_stdin(
        &self,
        Parameters(a): Parameters<crate::unified_exec::WriteStdinArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.sessions.write_stdin(&*self.exec, a).await {
            Ok(v) => ok(v),
            Err(e) => tool_error(&e),
        })
    }

    #[tool(
        description = "Read a text file from the sandbox, whole or `limit` lines from line `offset` (1-based). Content that is not UTF-8 comes back as {\"base64\": …}; content beyond the server's limit is dropped and counted in `truncated`."
    )]
    async fn read(&self, Parameters(a): Parameters<ReadArgs>) -> Result<CallToolResult, ErrorData> {
        let path = self.path(Some(&a.path));
        let range = match (a.offset, a.limit) {
            (None, None) => ReadRange::All,
            (first, count) => ReadRange::Lines {
                first: first.unwrap_or(1),
                count,
            },
        };
        Ok(match self.tools().read(&path, range).await {
            Ok(b) => {
                let (kept, dropped) = capped(&b, self.max_output);
                ok(json!({ "path": path, "content": text(kept), "truncated": dropped }))
            }
            Err(e) => tool_error(&e),
        })
    }

    #[tool(
        description = "Write a whole file in the sandbox, atomically (a temporary file renamed over it; an existing file's mode is kept). Missing parent directories are created unless `create_parents` is false."
    )]
    async fn write(
        &self,
        Parameters(a): Parameters<WriteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = self.path(Some(&a.path));
        let n = a.content.len();
        let options = WriteOptions {
            create_parents: a.create_parents.unwrap_or(true),
        };
        Ok(
            match self
                .tools()
                .write_with(&path, a.content.into_bytes(), options)
                .await
            {
                Ok(()) => ok(json!({ "path": path, "bytes": n })),
                Err(e) => tool_error(&e),
            },
        )
    }

    #[tool(
        description = "Replace exact text in a file: `old` must occur exactly once (error `not-unique` with the count otherwise, or `no-match` when absent) unless `replace_all` is true. The file is rewritten atomically; nothing is written on error."
    )]
    async fn edit(&self, Parameters(a): Parameters<EditArgs>) -> Result<CallToolResult, ErrorData> {
        let path = self.path(Some(&a.path));
        Ok(
            match self
                .tools()
                .edit(&path, &a.old, &a.new, a.replace_all)
                .await
            {
                Ok(n) => ok(json!({ "path": path, "replacements": n })),
                Err(e) => tool_error(&e),
            },
        )
    }

    #[tool(
        description = "Find files whose path relative to `dir` matches a glob (`**/*.rs`). Sorted by path in byte order; at most `limit`, the rest counted in `omitted`."
    )]
    async fn glob(&self, Parameters(a): Parameters<GlobArgs>) -> Result<CallToolResult, ErrorData> {
        let dir = self.path(a.dir.as_deref());
        Ok(
            match self
                .tools()
                .glob(&dir, &a.pattern, a.limit.unwrap_or(1000))
                .await
            {
                Ok(l) => ok(
                    json!({ "dir": dir, "paths": l.items, "omitted": l.omitted, "skipped": l.skipped }),
                ),
                Err(e) => tool_error(&e),
            },
        )
    }

    #[tool(
        description = "Search file contents below `dir` with a POSIX extended regex (or a plain string with `fixed`), optionally `ignore_case`, filtered by `glob`. `mode`: `content` (matching lines with line numbers, `before`/`after` context lines), `files` (paths only) or `count` (matches per file). Sorted by path then line; at most `limit`, the rest counted in `omitted`."
    )]
    async fn grep(&self, Parameters(a): Parameters<GrepArgs>) -> Result<CallToolResult, ErrorData> {
        let dir = self.path(a.dir.as_deref());
        let options = GrepOptions {
            glob: a.glob.clone(),
            fixed: a.fixed,
            ignore_case: a.ignore_case,
            before: a.before,
            after: a.after,
        };
        let limit = a.limit.unwrap_or(200);
        let t = self.tools();
        let r = match a.mode {
            GrepMode::Content => t
                .grep(&dir, &a.pattern, &options, limit)
                .await
                .map(|l| json!({ "dir": dir, "matches": l.items, "omitted": l.omitted, "skipped": l.skipped })),
            GrepMode::Files => t
                .grep_files(&dir, &a.pattern, &options, limit)
                .await
                .map(|l| json!({ "dir": dir, "files": l.items, "omitted": l.omitted, "skipped": l.skipped })),
            GrepMode::Count => t
                .grep_count(&dir, &a.pattern, &options, limit)
                .await
                .map(|l| json!({ "dir": dir, "counts": l.items, "omitted": l.omitted, "skipped": l.skipped })),
        };
        Ok(match r {
            Ok(v) => ok(v),
            Err(e) => tool_error(&e),
        })
    }

    #[tool(
        description = "List the entries below a directory down to `depth` levels (default 1), directories marked with `is_dir`, symlinks never followed. Sorted by path; at most `limit`, the rest counted in `omitted`."
    )]
    async fn list(&self, Parameters(a): Parameters<ListArgs>) -> Result<CallToolResult, ErrorData> {
        let dir = self.path(a.dir.as_deref());
        Ok(
            match self
                .tools()
                .list(&dir, Some(a.depth.unwrap_or(1)), a.limit.unwrap_or(1000))
                .await
            {
                Ok(l) => ok(
                    json!({ "dir": dir, "entries": l.items, "omitted": l.omitted, "skipped": l.skipped }),
                ),
                Err(e) => tool_error(&e),
            },
        )
    }

    #[tool(
        description = "Apply a patch below `dir`: a unified diff or the `*** Begin Patch` / `*** Add File:` / `*** Update File:` / `*** Delete File:` / `*** End Patch` format. All or nothing: if any hunk does not apply (error `patch-conflict`), no file is written."
    )]
    async fn apply_patch(
        &self,
        Parameters(a): Parameters<PatchArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let dir = self.path(a.dir.as_deref());
        Ok(match self.tools().apply_patch(&dir, &a.patch).await {
            Ok(files) => ok(json!({ "dir": dir, "files": files })),
            Err(e) => tool_error(&e),
        })
    }

    #[tool(
        description = "Run an exact Python, JavaScript, TypeScript or Bash program in the sandbox. Returns stdout, stderr and the exit status separately; a non-zero exit is a normal result."
    )]
    async fn code(&self, Parameters(a): Parameters<CodeArgs>) -> Result<CallToolResult, ErrorData> {
        let language = match a.language {
            CodeLanguage::Python => Language::Python,
            CodeLanguage::Javascript => Language::Javascript,
            CodeLanguage::Typescript => Language::Typescript,
            CodeLanguage::Bash => Language::Bash,
        };
        let timeout = a.timeout_secs.map(Duration::from_secs);
        Ok(
            match self.tools().code(language, &a.source, timeout).await {
                Ok(o) => ok(self.output(&o)),
                Err(e) => tool_error(&e),
            },
        )
    }

    #[tool(
        description = "Read a background command's output (`id` from `bash` with `run_in_background`): the stdout and stderr written since this server's last read of it, or from the byte offsets `stdout_from`/`stderr_from`. Answers at once, or with `block` first waits for the command to end (with `block_until: \"output\"`: for its first output past the read's offsets, or its end), up to `timeout_ms` (default 30000). Returns `state` (running, exited with `exit`, or unknown: its supervisor died without an exit, so the outcome is not known), the offsets `next` to read from, and `complete` once the command exited and everything was read. A read returns at most the server's output limit per stream; the rest comes on the next read. With `filter` (a regular expression) only the whole lines that match are returned, and the read moves past the others."
    )]
    async fn bash_output(
        &self,
        Parameters(a): Parameters<BashOutputArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let p = match self.processes() {
            Ok(p) => p,
            Err(e) => return Ok(e),
        };
        let filter = match a.filter.as_deref().map(line_filter).transpose() {
            Ok(f) => f,
            Err(e) => return Ok(tool_error(&e)),
        };
        let handle = ProcessHandle::new(a.id.clone());
        let last = self
            .cursors
            .lock()
            .expect("cursors")
            .get(&a.id)
            .copied()
            .unwrap_or_default();
        let from = StreamOffsets::new(
            a.stdout_from.unwrap_or(last.stdout),
            a.stderr_from.unwrap_or(last.stderr),
        );
        // Claude Code's TaskOutput `block` and `timeout` (ms, 0..=600000, default 30000): a
        // wait for the end (or for new output), then the read (the state says whether it ended).
        if a.block == Some(true) {
            let ms = a.timeout_ms.unwrap_or(30_000);
            if ms > 600_000 {
                return Ok(tool_error(&ToolError::InvalidArgument {
                    message: format!("timeout_ms {ms} is over 600000"),
                }));
            }
            let within = Duration::from_millis(ms);
            let waited = match a.block_until.unwrap_or_default() {
                BlockUntil::Exit => p.wait(&handle, within).await.map(drop),
                BlockUntil::Output => first_output(&*p, &handle, from, within).await,
            };
            if let Err(e) = waited {
                return Ok(tool_error(&ToolError::Exec(e)));
            }
        } else if a.timeout_ms.is_some() || a.block_until.is_some() {
            return Ok(tool_error(&ToolError::InvalidArgument {
                message: "timeout_ms and block_until need block".into(),
            }));
        }
        let read = match p.read(&handle, from).await {
            Ok(r) => r,
            Err(e) => return Ok(tool_error(&ToolError::Exec(e))),
        };
        let ended = read.state != ProcessState::Running;
        let pick = |chunk: &Bytes, from: u64, written: u64| -> (Vec<u8>, u64) {
            let (part, rest) = capped(chunk, self.max_output);
            match &filter {
                None => (part.to_vec(), part.len() as u64),
                Some(f) => {
                    let last = ended && rest == 0 && from + chunk.len() as u64 == written;
                    let (kept, used) = keep_lines(part, f, last, rest > 0);
                    (kept, used as u64)
                }
            }
        };
        let (out, out_used) = pick(&read.stdout, from.stdout, read.written.stdout);
        let (err, err_used) = pick(&read.stderr, from.stderr, read.written.stderr);
        let next = StreamOffsets::new(from.stdout + out_used, from.stderr + err_used);
        self.cursors.lock().expect("cursors").insert(a.id, next);
        let (state, exit) = match read.state {
            ProcessState::Running => ("running", None),
            ProcessState::Exited(exit) => ("exited", Some(exit)),
            ProcessState::Unknown => ("unknown", None),
        };
        Ok(ok(json!({
            "stdout": text(&out),
            "stderr": text(&err),
            "from": { "stdout": from.stdout, "stderr": from.stderr },
            "next": { "stdout": next.stdout, "stderr": next.stderr },
            "written": { "stdout": read.written.stdout, "stderr": read.written.stderr },
            "state": state,
            "exit": exit,
            "complete": exit.is_some() && next == read.written,
        })))
    }

    #[tool(
        description = "Forget a background command that has ended (`id` from `bash` with `run_in_background`): its output and exit are no longer kept and the `id` is no longer valid. A running command is refused (`conflict`): end it with `bash_kill` first."
    )]
    async fn bash_release(
        &self,
        Parameters(a): Parameters<BashReleaseArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let p = match self.processes() {
            Ok(p) => p,
            Err(e) => return Ok(e),
        };
        if let Err(e) = p.release(&ProcessHandle::new(a.id.clone())).await {
            return Ok(tool_error(&ToolError::Exec(e)));
        }
        self.cursors.lock().expect("cursors").remove(&a.id);
        Ok(ok(json!({ "id": a.id, "released": true })))
    }

    #[tool(
        description = "Write text to a background command's stdin (started with `keep_stdin_open`), after everything written before; `close` then closes it. Returns the bytes accepted so far and whether stdin is closed."
    )]
    async fn bash_stdin(
        &self,
        Parameters(a): Parameters<BashStdinArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let p = match self.processes() {
            Ok(p) => p,
            Err(e) => return Ok(e),
        };
        let handle = ProcessHandle::new(a.id);
        let at = match p.status(&handle).await {
            Ok(info) => info.stdin.map_or(0, |s| s.accepted),
            Err(e) => return Ok(tool_error(&ToolError::Exec(e))),
        };
        let write = StdinWrite {
            at,
            data: Bytes::from(a.data.into_bytes()),
            close: a.close == Some(true),
        };
        Ok(match p.write_stdin(&handle, write).await {
            Ok(state) => ok(json!({ "accepted": state.accepted, "closed": state.closed })),
            Err(e) => tool_error(&ToolError::Exec(e)),
        })
    }

    #[tool(
        description = "Send a signal (default TERM) to a background command's whole process group, so its children end with it, then wait up to 2 s for its exit. Returns `state` (exited with `exit`, or still running). Its output stays readable with `bash_output`."
    )]
    async fn bash_kill(
        &self,
        Parameters(a): Parameters<BashKillArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let name = a.signal.as_deref().unwrap_or("TERM");
        let Some(signal) = Signal::parse(name) else {
            return Ok(tool_error(&ToolError::InvalidArgument {
                message: format!("signal {name:?} is not one of HUP INT QUIT KILL USR1 USR2 TERM"),
            }));
        };
        let p = match self.processes() {
            Ok(p) => p,
            Err(e) => return Ok(e),
        };
        let handle = ProcessHandle::new(a.id);
        if let Err(e) = p.signal(&handle, signal).await {
            return Ok(tool_error(&ToolError::Exec(e)));
        }
        Ok(match p.wait(&handle, Duration::from_secs(2)).await {
            Ok(Waited::Exited(exit)) => {
                ok(json!({ "signal": signal.name(), "state": "exited", "exit": exit }))
            }
            Ok(Waited::Running) => {
                ok(json!({ "signal": signal.name(), "state": "running", "exit": null }))
            }
            Err(e) => tool_error(&ToolError::Exec(e)),
        })
    }
}

#[tool_handler]
impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            format!(
                "Tools over one {} sandbox. Relative paths are resolved against {}.{}",
                self.exec.provider(),
                self.root,
                if self.confine {
                    " Every path must stay below it, through no symlink."
                } else {
                    ""
                }
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{keep_lines, line_filter};

    #[test]
    fn a_filter_keeps_whole_matching_lines_and_consumes_the_rest() {
        let f = line_filter("^FAIL").unwrap();
        let chunk = b"ok 1\nFAIL a\r\nok 2\nFAIL b\nFAIL par";
        // Running: the unfinished last line waits for its newline.
        assert_eq!(
            keep_lines(chunk, &f, false, false),
            (b"FAIL a\r\nFAIL b\n".to_vec(), 25)
        );
        // Ended and read to the end: the last line is judged as it is.
        assert_eq!(
            keep_lines(chunk, &f, true, false),
            (b"FAIL a\r\nFAIL b\nFAIL par".to_vec(), chunk.len())
        );
        // One line longer than the output limit is judged as cut, never held back forever.
        assert_eq!(keep_lines(b"FAIL long", &f, false, true).1, 9);
        assert_eq!(keep_lines(b"FAIL long", &f, false, false), (vec![], 0));
        let ci = line_filter("(?i)error").unwrap();
        assert_eq!(
            keep_lines(b"x\nan Error\n", &ci, false, false).0,
            b"an Error\n"
        );
        assert!(line_filter("(unclosed").is_err());
    }
}
