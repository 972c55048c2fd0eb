//! The [`Exec`] implementation: session lifecycle, the command string, the two exec modes, the
//! exact-output framing, and the files tools.

use execseam_adapter_kit::exec_span;
use execseam_adapter_kit::retry::Call;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_bedrockagentcore::types::{ContentBlockType, InputContentBlock, ToolArguments};
use aws_smithy_types::Blob;
use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, Leftovers, StdinFrom, WrapOptions};
use execseam_core::{
    BoxFuture, Capabilities, Command, Delivery, Error, ErrorKind, Exec, Exit, Output, Ownership,
    Retry, Sandbox,
};

use crate::PROVIDER;
use crate::client::Client;
use crate::config::{AgentCoreConfig, ExecMode};
use crate::error::{
    self, LIST_FILES, POLL, READ_FILES, REMOVE_FILES, STOP_TASK, SUBMIT, WRITE_FILES,
};
use crate::wire::{self, TaskStatus, ToolResult, tool};

/// The capabilities of a configuration.
pub const fn capabilities_for(mode: ExecMode, exact_output: bool) -> Capabilities {
    Capabilities {
        argv: Delivery::ShellWrapped,
        stdin: Delivery::TempFile,
        workdir: Delivery::ShellWrapped,
        env: Delivery::ShellWrapped,
        streaming: false,
        remote_kill: matches!(mode, ExecMode::Task),
        binary_output: exact_output,
        // writeFiles' `blob` is at most 100,000,000 bytes (the model's `Body`).
        max_stdin: Some(100_000_000),
        max_output: None,
        native_tools: &[],
        processes: Some(execseam_adapter_kit::spool::SPOOLED),
    }
}

/// The first line of an exact-output frame.
const EXACT_BEGIN: &str = "execseam-exact-v1";
/// The first line of the one-pass frame (see [`decode_exact_v2`]).
const EXACT_BEGIN_V2: &str = "execseam-exact-v2";
/// The largest stream the one-pass frame sends as text; a larger one is sent base64-encoded.
/// The shell's `read` costs about as much per 16 KiB as starting `base64` once.
const TEXT_MAX: usize = 16 * 1024;
/// How many frame files wait before a frame removes them (two per exec: one `rm` per 32 execs).
const LEFTOVER_BATCH: usize = 64;
/// The line between the stdout and the stderr part of a frame.
const EXACT_SPLIT: &str = "execseam-exact-stderr";
/// The last line: `execseam-exact-end <status>`.
const EXACT_END: &str = "execseam-exact-end";

/// One entry of [`AgentCoreExec::list_dir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name.
    pub name: String,
    /// The directory asked for, joined with the name.
    pub path: String,
    /// True for a directory (`description: "Directory"`).
    pub is_dir: bool,
    /// The size the service reported, if any.
    pub size: Option<u64>,
}

/// Runs commands in one AgentCore Code Interpreter session. See the [crate docs](crate).
///
/// Cloning shares the session. A session started by [`connect`](Self::connect) is stopped by
/// [`close`](Self::close), or, best effort, when the last clone is dropped inside a tokio runtime.
#[derive(Clone)]
pub struct AgentCoreExec {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    config: AgentCoreConfig,
    session_id: String,
    ownership: Ownership,
    /// Earlier frames' files, removed in batches by later frames.
    leftovers: Leftovers,
}

impl fmt::Debug for AgentCoreExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentCoreExec")
            .field("session_id", &self.inner.session_id)
            .field("owned", &self.inner.ownership.owned())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.ownership.destroy_on_drop() {
            return;
        }
        let client = self.client.clone();
        let sid = self.session_id.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "stop the session", async move {
            client.stop_session(&sid).await
        });
    }
}

fn session_name() -> String {
    degrade::temp_path("/")
        .trim_start_matches("/.")
        .replace("execseam-", "execseam-session-")
}

impl AgentCoreExec {
    /// Starts a session; the handle owns it (close stops it).
    pub(crate) async fn start(
        client: Client,
        config: AgentCoreConfig,
        timeout: Duration,
    ) -> Result<AgentCoreExec, Error> {
        let name = config.session_name.clone().unwrap_or_else(session_name);
        let timeout = i32::try_from(timeout.as_secs()).unwrap_or(28_800);
        let session_id = client.start_session(&name, timeout).await?;
        tracing::debug!(session = %session_id, "agentcore: session started");
        Ok(AgentCoreExec::attach(
            client,
            config,
            session_id,
            Ownership::created(),
        ))
    }

    pub(crate) fn attach(
        client: Client,
        config: AgentCoreConfig,
        session_id: String,
        ownership: Ownership,
    ) -> AgentCoreExec {
        AgentCoreExec {
            inner: Arc::new(Inner {
                client,
                config,
                session_id,
                ownership,
                leftovers: Leftovers::new(LEFTOVER_BATCH),
            }),
        }
    }

    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// The configuration.
    pub fn config(&self) -> &AgentCoreConfig {
        &self.inner.config
    }

    /// Removes the frame files that earlier execs left for a later batch (best effort, when the
    /// session is kept).
    async fn remove_leftovers(&self) {
        let paths = self.inner.leftovers.take_all();
        if paths.is_empty() {
            return;
        }
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let args = ToolArguments::builder()
            .command(format!("rm -f -- {}", degrade::join(&paths)))
            .build();
        if let Err(e) = self
            .inner
            .invoke(SUBMIT, tool::execute_command(), args)
            .await
        {
            tracing::debug!(error = %e, "agentcore: removing earlier frame files failed");
        }
    }

    /// The path the files tools are given for `path`: relative to the session root when it lies
    /// under it (the service resolves relative paths against its working directory), else as is.
    fn files_path(&self, path: &str) -> String {
        let root = self.inner.config.session_root.trim_end_matches('/');
        match path.strip_prefix(root) {
            Some("") => ".".to_owned(),
            Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/').to_owned(),
            _ => path.to_owned(),
        }
    }

    /// Writes `data` to `path` with `writeFiles` (as a base64 `blob`, so any bytes survive).
    pub async fn write_file(&self, path: &str, data: impl Into<Bytes>) -> Result<(), Error> {
        self.inner
            .write(WRITE_FILES, &self.files_path(path), data.into())
            .await
    }

    /// Reads `path` with `readFiles` (a `text` or `blob` resource).
    pub async fn read_file(&self, path: &str) -> Result<Bytes, Error> {
        let args = ToolArguments::builder()
            .set_paths(Some(vec![self.files_path(path)]))
            .build();
        let r = self
            .inner
            .invoke(READ_FILES, tool::read_files(), args)
            .await?;
        if r.is_error {
            return Err(file_error(READ_FILES, path, &r));
        }
        let resource = r
            .content
            .iter()
            .find(|b| b.r#type() == &ContentBlockType::EmbeddedResource)
            .and_then(|b| b.resource());
        match resource.and_then(wire::resource_bytes) {
            Some(bytes) => Ok(Bytes::from(bytes)),
            None => Err(error::protocol(
                READ_FILES,
                format!("readFiles returned no resource for {path:?}"),
            )),
        }
    }

    /// Lists `dir` with `listFiles`, sorted by name (the service's order is not relied on).
    pub async fn list_dir(&self, dir: &str) -> Result<Vec<DirEntry>, Error> {
        let args = ToolArguments::builder()
            .directory_path(self.files_path(dir))
            .build();
        let r = self
            .inner
            .invoke(LIST_FILES, tool::list_files(), args)
            .await?;
        if r.is_error {
            return Err(file_error(LIST_FILES, dir, &r));
        }
        let base = dir.trim_end_matches('/');
        let mut entries: Vec<DirEntry> = r
            .content
            .iter()
            .filter(|b| b.r#type() == &ContentBlockType::ResourceLink)
            .filter_map(|b| {
                let name = b
                    .name()
                    .map(str::to_owned)
                    .or_else(|| {
                        b.uri()
                            .and_then(wire::uri_path)
                            .and_then(|p| p.rsplit('/').next())
                            .map(str::to_owned)
                    })
                    .filter(|n| !n.is_empty())?;
                Some(DirEntry {
                    path: format!("{base}/{name}"),
                    name,
                    is_dir: b.description() == Some("Directory"),
                    size: b.size().and_then(|s| u64::try_from(s).ok()),
                })
            })
            .collect();
        entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(entries)
    }

    /// Removes files with `removeFiles`.
    pub async fn remove_files(&self, paths: &[&str]) -> Result<(), Error> {
        let args = ToolArguments::builder()
            .set_paths(Some(paths.iter().map(|p| self.files_path(p)).collect()))
            .build();
        let r = self
            .inner
            .invoke(REMOVE_FILES, tool::remove_files(), args)
            .await?;
        if r.is_error {
            return Err(file_error(REMOVE_FILES, &paths.join(" "), &r));
        }
        Ok(())
    }
}

fn file_error(op: Call, path: &str, r: &ToolResult) -> Error {
    let message = r.message();
    let lower = message.to_ascii_lowercase();
    let kind = if lower.contains("not found")
        || lower.contains("no such file")
        || lower.contains("does not exist")
    {
        ErrorKind::NotFound
    } else if lower.contains("permission denied") {
        ErrorKind::PermissionDenied
    } else {
        ErrorKind::Internal
    };
    error::tool_error(op, kind, format!("{path}: {message}"))
}

/// The command string and what is needed to read its result.
struct Plan {
    command: String,
    /// The frame's files, left for a later frame to remove ([`Leftovers`]).
    files: Vec<String>,
    /// (the path given to writeFiles, the absolute path the wrapper reads) of the stdin file.
    stdin_file: Option<(String, String)>,
    exact: bool,
    /// The old frame (the benchmark's baseline).
    legacy: bool,
}

impl Plan {
    #[cfg(test)]
    fn new(cmd: &Command, config: &AgentCoreConfig) -> Result<Plan, Error> {
        Plan::removing(cmd, config, &[])
    }

    /// The plan of `cmd`, whose frame also removes `old` (earlier frames' files) in the
    /// background.
    fn removing(cmd: &Command, config: &AgentCoreConfig, old: &[String]) -> Result<Plan, Error> {
        let root = config.session_root.trim_end_matches('/');
        let stdin_file = (!cmd.stdin().is_empty()).then(|| {
            let abs = degrade::temp_path(root);
            let rel = abs
                .strip_prefix(root)
                .unwrap_or(&abs)
                .trim_start_matches('/')
                .to_owned();
            (rel, abs)
        });
        let opts = WrapOptions {
            workdir: true,
            env: true,
            stdin: match &stdin_file {
                Some((_, abs)) => StdinFrom::File(abs.clone()),
                None => StdinFrom::Backend,
            },
            ..WrapOptions::default()
        };
        let legacy = config.exact_output && config.legacy_framing;
        let mut files = Vec::new();
        let command = if config.exact_output && !legacy {
            let script = degrade::script(cmd, &opts).map_err(|e| e.or_context(PROVIDER, "exec"))?;
            let out = degrade::temp_path(&config.temp_dir);
            let err = format!("{out}.err");
            // One pass, no program but the command for text: the command runs in a subshell of
            // the service's shell (no `/bin/sh -c`) with stdout and stderr in two files (a
            // pipe would lose NUL bytes in the shell and make the exit wait for background
            // children holding it), created mode 600 under a umask of 077 (the service's own
            // umask, read from `/proc` without starting a program, is the command's); each
            // file is read back by the shell's own `read`, which stops at a NUL. A file that
            // ends before a NUL and before TEXT_MAX bytes and holds only printable ASCII, tab
            // and newline is sent as `t <bytes>` and the bytes; anything else as `b` and
            // `base64` of the file. The files stay until a later frame removes a batch of them
            // (`old`) with one `rm` in the background, after its own frame is written.
            let remove = if old.is_empty() {
                String::new()
            } else {
                let paths: Vec<&str> = old.iter().map(String::as_str).collect();
                format!(
                    "rm -f -- {} </dev/null >/dev/null 2>&1 &\n",
                    degrade::join(&paths)
                )
            };
            files = vec![out.clone(), err.clone()];
            format!(
                "o={o}; e={e}\n\
                 u=; while read -r k v; do if [[ $k = Umask: ]]; then u=$v; break; fi; done </proc/self/status; [ -n \"$u\" ] || u=$(umask)\n\
                 umask 077\n\
                 ( umask \"$u\"; {script}\n) </dev/null >\"$o\" 2>\"$e\"; s=$?\n\
                 LC_ALL=C; execseam_t=$'[!\\t\\n -~]'\n\
                 execseam_f() {{ [ -r \"$1\" ] || return 1; if IFS= read -r -d '' -n {max} v <\"$1\"; then :; elif [[ $v != *$execseam_t* ]]; then printf 't %d\\n%s\\n' \"${{#v}}\" \"$v\"; return; fi; printf 'b\\n' && base64 <\"$1\"; }}\n\
                 printf '%s\\n' {begin} && execseam_f \"$o\" && printf '%s\\n' {split} && execseam_f \"$e\" && printf '%s %s\\n' {end} \"$s\"\n\
                 {remove}exit \"$s\"",
                o = degrade::quote(&out),
                e = degrade::quote(&err),
                max = TEXT_MAX,
                begin = EXACT_BEGIN_V2,
                split = EXACT_SPLIT,
                end = EXACT_END,
            )
        } else {
            let wrapped =
                degrade::wrapped_command(cmd, &opts).map_err(|e| e.or_context(PROVIDER, "exec"))?;
            // `/bin/sh -c '<script>'`, with stdin at EOF unless the script redirects it: the
            // service's own stdin is not an empty pipe.
            let inner = format!("{} </dev/null", degrade::join(wrapped.argv()));
            if legacy {
                let out = degrade::temp_path(&config.temp_dir);
                let err = format!("{out}.err");
                format!(
                    "o={o}; e={e}; (umask 077; : >\"$o\"; : >\"$e\")\n\
                     {inner} >\"$o\" 2>\"$e\"; s=$?\n\
                     printf '%s\\n' {begin} && base64 <\"$o\" && printf '%s\\n' {split} && base64 <\"$e\" && printf '%s %s\\n' {end} \"$s\"\n\
                     rm -f -- \"$o\" \"$e\"; exit \"$s\"",
                    o = degrade::quote(&out),
                    e = degrade::quote(&err),
                    begin = EXACT_BEGIN,
                    split = EXACT_SPLIT,
                    end = EXACT_END,
                )
            } else {
                inner
            }
        };
        Ok(Plan {
            command,
            files,
            stdin_file,
            exact: config.exact_output,
            legacy,
        })
    }

    /// The command's [`Output`] from the result of the invocation that ran it.
    fn output(&self, r: &ToolResult) -> Result<Output, Error> {
        let code = match r.exit_codes.as_slice() {
            [c] => Some(*c),
            [] => None,
            many => {
                return Err(error::protocol(
                    SUBMIT,
                    format!("the result carries {} exit codes: {many:?}", many.len()),
                ));
            }
        };
        let stdout = r.stdout.as_deref().unwrap_or_default();
        let stderr = r.stderr.as_deref().unwrap_or_default();
        if self.exact {
            let decoded = if self.legacy {
                decode_exact(stdout)
            } else {
                decode_exact_v2(stdout)
            };
            let (out, err, status) = match decoded {
                Ok(d) => d,
                Err(why) if r.is_error && code.is_none() => {
                    return Err(tool_failed(format!(
                        "the command failed without a result ({why}): {}",
                        r.message()
                    )));
                }
                Err(why) => {
                    return Err(error::protocol(
                        SUBMIT,
                        format!(
                            "the exact-output frame is unreadable ({why}); exit code {code:?}, stderr {:?}",
                            truncate(stderr, 500)
                        ),
                    ));
                }
            };
            if let Some(c) = code
                && c != status
            {
                return Err(error::protocol(
                    SUBMIT,
                    format!("exitCode {c} disagrees with the wrapper's status {status}"),
                ));
            }
            if r.is_error && status == 0 {
                return Err(tool_failed(format!(
                    "isError with exit status 0: {}",
                    r.message()
                )));
            }
            let output = Output::new(out, err, Exit::Code(status));
            return degrade::check_wrapped(output).map_err(|e| e.or_context(PROVIDER, "exec"));
        }
        let Some(code) = code else {
            if r.is_error {
                return Err(tool_failed(format!(
                    "the command failed without an exit code: {}",
                    r.message()
                )));
            }
            return Err(error::protocol(
                SUBMIT,
                "the result has no structuredContent.exitCode",
            ));
        };
        if r.is_error && code == 0 {
            return Err(tool_failed(format!(
                "isError with exitCode 0: {}",
                r.message()
            )));
        }
        // A negative code is how a Python runner reports a signal death (-N).
        let exit = if code < 0 {
            Exit::Signal(-code)
        } else {
            Exit::Code(code)
        };
        let output = Output::new(stdout.to_owned(), stderr.to_owned(), exit);
        degrade::check_wrapped(output).map_err(|e| e.or_context(PROVIDER, "exec"))
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn decode_b64(lines: &[&str]) -> Result<Vec<u8>, String> {
    let text: String = lines
        .iter()
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    aws_smithy_types::base64::decode(&text).map_err(|e| format!("bad base64: {e}"))
}

/// Reads the exact-output frame: `execseam-exact-v1`, base64 of stdout, `execseam-exact-stderr`,
/// base64 of stderr, `execseam-exact-end <status>`. Line endings may have become CRLF (a pty); text
/// before the first line is not the command's (it wrote to a file) and is ignored.
fn decode_exact(text: &str) -> Result<(Vec<u8>, Vec<u8>, i32), String> {
    let lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
    let begin = lines
        .iter()
        .position(|l| *l == EXACT_BEGIN)
        .ok_or("no begin line")?;
    let split = lines[begin..]
        .iter()
        .position(|l| *l == EXACT_SPLIT)
        .map(|i| i + begin)
        .ok_or("no stderr line")?;
    let end = lines[split..]
        .iter()
        .position(|l| l.starts_with(EXACT_END))
        .map(|i| i + split)
        .ok_or("no end line (the wrapper did not finish)")?;
    if lines[end + 1..].iter().any(|l| !l.trim().is_empty()) {
        return Err("text after the end line".into());
    }
    let status: i32 = lines[end][EXACT_END.len()..]
        .trim()
        .parse()
        .map_err(|_| format!("bad end line {:?}", lines[end]))?;
    let out = decode_b64(&lines[begin + 1..split])?;
    let err = decode_b64(&lines[split + 1..end])?;
    Ok((out, err, status))
}

/// Reads the one-pass frame: `execseam-exact-v2`, the stdout part, `execseam-exact-stderr`, the
/// stderr part, `execseam-exact-end <status>`. A part is `t <n>` and the next `n` bytes (text the
/// shell checked: printable ASCII, tab and newline only, no NUL), or `b` and base64 lines. Line
/// endings may have become CRLF (a pty): nothing the frame carries holds a carriage return, so
/// every `\r` before a `\n` is the transport's and is removed before parsing. Text before the
/// first line is not the command's (it wrote to a file) and is ignored.
fn decode_exact_v2(text: &str) -> Result<(Vec<u8>, Vec<u8>, i32), String> {
    let text = text.replace("\r\n", "\n");
    let begin = format!("{EXACT_BEGIN_V2}\n");
    let start = if text.starts_with(&begin) {
        0
    } else {
        text.find(&format!("\n{begin}"))
            .map(|i| i + 1)
            .ok_or("no begin line")?
    };
    let mut rest = &text[start + begin.len()..];
    let out = frame_part(&mut rest)?;
    rest = rest
        .strip_prefix(EXACT_SPLIT)
        .and_then(|r| r.strip_prefix('\n'))
        .ok_or("no stderr line")?;
    let err = frame_part(&mut rest)?;
    let end = rest
        .strip_prefix(EXACT_END)
        .ok_or("no end line (the wrapper did not finish)")?;
    let (status, after) = end.split_once('\n').unwrap_or((end, ""));
    if !after.trim().is_empty() {
        return Err("text after the end line".into());
    }
    let status: i32 = status
        .trim()
        .parse()
        .map_err(|_| format!("bad end line {:?}", format!("{EXACT_END}{status}")))?;
    Ok((out, err, status))
}

/// One part of a one-pass frame; leaves `rest` at the line after it.
fn frame_part(rest: &mut &str) -> Result<Vec<u8>, String> {
    let (line, after) = rest
        .split_once('\n')
        .ok_or("a part without its first line")?;
    if let Some(n) = line.strip_prefix("t ") {
        let n: usize = n.parse().map_err(|_| format!("bad text length {n:?}"))?;
        let data = after
            .get(..n)
            .ok_or_else(|| format!("a text part of {n} bytes is cut short"))?;
        *rest = after[n..]
            .strip_prefix('\n')
            .ok_or("a text part is longer than its length")?;
        return Ok(data.as_bytes().to_vec());
    }
    if line != "b" {
        return Err(format!("bad part line {:?}", truncate(line, 80)));
    }
    let end = after
        .find("\nexecseam-exact-")
        .map(|i| i + 1)
        .or_else(|| after.starts_with("execseam-exact-").then_some(0))
        .ok_or("a base64 part without an end")?;
    let lines: Vec<&str> = after[..end].lines().collect();
    *rest = &after[end..];
    decode_b64(&lines)
}

/// Stops a task if the exec is dropped (or fails) before the task ended.
struct StopOnDrop {
    client: Client,
    session_id: String,
    task_id: String,
    armed: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let sid = self.session_id.clone();
        let task = self.task_id.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "stop the task", async move {
            let args = ToolArguments::builder().task_id(task).build();
            client
                .invoke(STOP_TASK, &sid, tool::stop_task(), args)
                .await
                .map(|_| ())
        });
    }
}

/// After the command was submitted, nothing is safe to retry.
fn after_submit(e: Error) -> Error {
    if e.retry().is_safe() {
        e.with_retry(Retry::Unsafe)
    } else {
        e
    }
}

impl Inner {
    async fn invoke(
        &self,
        op: Call,
        tool: aws_sdk_bedrockagentcore::types::ToolName,
        args: ToolArguments,
    ) -> Result<ToolResult, Error> {
        self.client.invoke(op, &self.session_id, tool, args).await
    }

    async fn write(&self, op: Call, path: &str, data: Bytes) -> Result<(), Error> {
        let block = InputContentBlock::builder()
            .path(path)
            .blob(Blob::new(data.to_vec()))
            .build()
            .map_err(|e| error::protocol(op, format!("cannot build writeFiles content: {e}")))?;
        let args = ToolArguments::builder()
            .set_content(Some(vec![block]))
            .build();
        let r = self.invoke(op, tool::write_files(), args).await?;
        if r.is_error {
            return Err(file_error(op, path, &r));
        }
        Ok(())
    }

    async fn run(self: Arc<Self>, cmd: Command) -> Result<Output, Error> {
        execseam_adapter_kit::size::check_size(PROVIDER, &cmd, &crate::SIZE_LIMIT)?;
        let old = self.leftovers.take_batch();
        let plan = match Plan::removing(&cmd, &self.config, &old) {
            Ok(plan) => plan,
            Err(e) => {
                self.leftovers.put(old);
                return Err(e);
            }
        };
        // This frame's files are removed by a later one; an exec that failed or was dropped
        // may not have removed the batch it carried, so that goes back too.
        let mut guard = self.leftovers.track(plan.files.clone(), old);
        let r = self.run_plan(&cmd, &plan).await;
        if r.is_ok() {
            guard.removed();
        }
        r
    }

    async fn run_plan(self: &Arc<Self>, cmd: &Command, plan: &Plan) -> Result<Output, Error> {
        // What counts is the `bash -c` string as sent: the wrapper, quoted twice.
        execseam_adapter_kit::size::check_wire(PROVIDER, &[&plan.command], &crate::SIZE_LIMIT)?;
        if let Some((rel, _)) = &plan.stdin_file {
            self.write(WRITE_FILES, rel, cmd.stdin().clone())
                .await
                .map_err(|e| e.with_operation("exec"))?;
        }
        let result = match self.config.mode {
            ExecMode::Command => {
                let args = ToolArguments::builder()
                    .command(plan.command.clone())
                    .build();
                self.invoke(SUBMIT, tool::execute_command(), args).await
            }
            ExecMode::Task => self.run_task(&plan.command).await,
        };
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                if let Some((rel, _)) = &plan.stdin_file {
                    self.forget(rel.clone());
                }
                return Err(e);
            }
        };
        plan.output(&result)
    }

    /// Removes a stdin file the wrapper may never have consumed (best effort, in the background).
    fn forget(self: &Arc<Self>, rel: String) {
        let inner = self.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "remove a stdin file", async move {
            let args = ToolArguments::builder().set_paths(Some(vec![rel])).build();
            inner
                .invoke(REMOVE_FILES, tool::remove_files(), args)
                .await
                .map(|_| ())
        });
    }

    async fn run_task(&self, command: &str) -> Result<ToolResult, Error> {
        let args = ToolArguments::builder().command(command).build();
        let started = self
            .invoke(SUBMIT, tool::start_command_execution(), args)
            .await?;
        let Some(task_id) = started.task_id.clone() else {
            if started.is_error {
                return Err(tool_failed(format!(
                    "startCommandExecution failed: {}",
                    started.message()
                )));
            }
            return Err(error::protocol(
                SUBMIT,
                "startCommandExecution returned no structuredContent.taskId",
            ));
        };
        let mut guard = StopOnDrop {
            client: self.client.clone(),
            session_id: self.session_id.clone(),
            task_id: task_id.clone(),
            armed: true,
        };
        if started.is_error {
            return Err(tool_failed(format!(
                "startCommandExecution failed: {}",
                started.message()
            )));
        }
        let mut delay = Duration::from_millis(10);
        loop {
            let args = ToolArguments::builder().task_id(task_id.clone()).build();
            let r = self
                .invoke(POLL, tool::get_task(), args)
                .await
                .map_err(after_submit)?;
            match r.status() {
                Some(s) if s.is_running() => {}
                Some(TaskStatus::Completed | TaskStatus::Failed) => {
                    guard.armed = false;
                    return Ok(r);
                }
                Some(TaskStatus::Canceled) => {
                    guard.armed = false;
                    return Err(Error::new(
                        ErrorKind::Cancelled,
                        format!("task {task_id} was canceled in the sandbox"),
                    )
                    .with_provider(PROVIDER)
                    .with_operation("exec")
                    .with_retry(Retry::Unsafe));
                }
                Some(other) => {
                    return Err(error::protocol(
                        SUBMIT,
                        format!("getTask returned an unknown taskStatus {other:?}"),
                    ));
                }
                None if !r.exit_codes.is_empty() => {
                    guard.armed = false;
                    return Ok(r);
                }
                None => {
                    return Err(error::protocol(
                        SUBMIT,
                        format!(
                            "getTask returned neither a taskStatus nor an exitCode: {}",
                            r.message()
                        ),
                    ));
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(self.config.poll_max);
        }
    }
}

impl Exec for AgentCoreExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: capabilities_for(self.inner.config.mode, self.inner.config.exact_output),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| {
            self.inner.clone().run(command)
        })
    }

    /// The adapter kit's spool in the session's `/tmp` (`startCommandExecution`/`getTask` take no
    /// stdin, no signal and no offsets, and return output only at the end).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        execseam_adapter_kit::spool::processes(self)
    }
}

impl Sandbox for AgentCoreExec {
    execseam_adapter_kit::accessors!(
        self => id: &self.inner.session_id,
        ownership: &self.inner.ownership,
    );

    /// `StopCodeInterpreterSession`: commands still running in it are ended by the service.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.inner.client.stop_session(&self.inner.session_id))
    }

    /// The frame files that earlier execs left for a later batch (best effort).
    fn release(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.remove_leftovers().await;
            Ok(())
        })
    }
}

/// The tool reported a failure (`isError`) the result does not explain: `Internal`.
fn tool_failed(message: String) -> Error {
    error::tool_error(SUBMIT, ErrorKind::Internal, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_adapter_kit::degrade::base64_encode;

    fn frame(out: &[u8], err: &[u8], status: i32, crlf: bool) -> String {
        let s = format!(
            "{EXACT_BEGIN}\n{}\n{EXACT_SPLIT}\n{}\n{EXACT_END} {status}\n",
            base64_encode(out),
            base64_encode(err)
        );
        if crlf { s.replace('\n', "\r\n") } else { s }
    }

    #[test]
    fn exact_frames_decode_byte_exact_even_through_a_pty() {
        let out: Vec<u8> = (0..=255u8).collect();
        for crlf in [false, true] {
            let text = format!("motd noise\n{}", frame(&out, b"e\xff", 3, crlf));
            let (o, e, s) = decode_exact(&text).unwrap();
            assert_eq!(o, out);
            assert_eq!(e, b"e\xff");
            assert_eq!(s, 3);
        }
    }

    #[test]
    fn incomplete_frames_are_rejected() {
        let full = frame(b"abc", b"", 0, false);
        // Without the end line (the wrapper died, or the service truncated stdout).
        let cut = full.replace(&format!("{EXACT_END} 0\n"), "");
        assert!(decode_exact(&cut).is_err());
        assert!(decode_exact("").is_err());
        assert!(decode_exact(&full.replace("YWJj", "Y*Jj")).is_err());
        assert!(decode_exact(&format!("{full}extra\n")).is_err());
    }

    fn cfg() -> AgentCoreConfig {
        AgentCoreConfig::new("us-east-1", "a", "b")
    }

    fn result(stdout: &str, stderr: &str, exit: Option<i32>, is_error: bool) -> ToolResult {
        ToolResult {
            events: 1,
            is_error,
            stdout: Some(stdout.to_owned()),
            stderr: Some(stderr.to_owned()),
            exit_codes: exit.into_iter().collect(),
            ..Default::default()
        }
    }

    #[test]
    fn raw_results_map_to_outputs_and_errors() {
        let cmd = Command::new(["true"]).unwrap();
        let plan = Plan::new(&cmd, &cfg().exact_output(false)).unwrap();
        let o = plan.output(&result("o", "e", Some(3), true)).unwrap();
        assert_eq!(o, Output::new("o", "e", Exit::Code(3)));
        let o = plan.output(&result("", "", Some(-9), true)).unwrap();
        assert_eq!(o.exit, Exit::Signal(9));
        let e = plan.output(&result("", "", None, false)).unwrap_err();
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Protocol, Retry::Unsafe));
        let e = plan.output(&result("", "", Some(0), true)).unwrap_err();
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Internal, Retry::Unsafe));
        let mut two = result("", "", Some(0), false);
        two.exit_codes.push(1);
        assert_eq!(plan.output(&two).unwrap_err().kind(), ErrorKind::Protocol);
        // The wrapper's own failure (a missing workdir) is an error, not exit 125.
        let e = plan
            .output(&result(
                "",
                "execseam-wrapper: workdir does not exist: /nope\n",
                Some(125),
                true,
            ))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }

    /// Both exact framings (the legacy base64 one and the one-pass one): the frame's exit code
    /// must be the service's, and text that is no frame is a protocol error.
    #[test]
    fn exact_results_cross_check_the_exit_code() {
        let cmd = Command::new(["true"]).unwrap();
        let one_pass =
            "execseam-exact-v2\nt 3\nout\nexecseam-exact-stderr\nt 3\nerr\nexecseam-exact-end 4\n";
        for (config, text) in [
            (cfg().legacy_framing(true), frame(b"out", b"err", 4, false)),
            (cfg(), one_pass.to_owned()),
        ] {
            let plan = Plan::new(&cmd, &config).unwrap();
            let o = plan.output(&result(&text, "", Some(4), true)).unwrap();
            assert_eq!(o, Output::new("out", "err", Exit::Code(4)));
            let e = plan.output(&result(&text, "", Some(5), true)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol);
            let e = plan
                .output(&result(
                    "bash: base64: command not found",
                    "",
                    Some(127),
                    true,
                ))
                .unwrap_err();
            assert_eq!((e.kind(), e.retry()), (ErrorKind::Protocol, Retry::Unsafe));
        }
    }

    #[test]
    fn the_command_string_runs_argv_exactly_with_stdin_at_eof() {
        let cmd = Command::builder(["printf", "%s|", "a b", "$(x)", "'"])
            .workdir("/")
            .env("K", "v'1")
            .build()
            .unwrap();
        let plan = Plan::new(&cmd, &cfg().exact_output(false)).unwrap();
        assert!(plan.stdin_file.is_none());
        let sh = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&plan.command)
            .output()
            .unwrap();
        assert_eq!(sh.stdout, b"a b|$(x)|'|");
        assert!(plan.command.ends_with("</dev/null"), "{}", plan.command);
    }

    /// The frame as the service would return it: `bash -c` here, stdout through a pty's
    /// line discipline (LF to CRLF) and the lossy UTF-8 of a JSON string, as the emulator does.
    fn run_frame(cmd: &Command, config: &AgentCoreConfig) -> (Output, String) {
        let plan = Plan::new(cmd, config).unwrap();
        let sh = std::process::Command::new("bash")
            .arg("-c")
            .arg(&plan.command)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&sh.stdout).replace('\n', "\r\n");
        let code = sh.status.code().unwrap();
        let r = result(
            &stdout,
            &String::from_utf8_lossy(&sh.stderr),
            Some(code),
            code != 0,
        );
        (plan.output(&r).unwrap(), stdout)
    }

    #[test]
    fn the_one_pass_frame_is_byte_exact_and_text_is_sent_as_text() {
        // The frames' files go to a directory of this test's, removed with everything in it.
        struct Dir(std::path::PathBuf);
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let tmp = Dir(std::env::temp_dir().join(format!(
            "execseam-agentcore-frame-test-{}",
            std::process::id()
        )));
        std::fs::create_dir_all(&tmp.0).unwrap();
        let config = cfg().temp_dir(tmp.0.to_str().unwrap());
        let big: Vec<u8> = (0..40_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        type Case = (&'static str, Vec<u8>, Vec<u8>, i32, [bool; 2]);
        let cases: Vec<Case> = vec![
            // (script, stdout, stderr, status, [stdout as text, stderr as text])
            (
                "printf 'hello\\n'",
                b"hello\n".to_vec(),
                vec![],
                0,
                [true, true],
            ),
            (
                "printf 'a\\n\\n\\n'; printf ' e \\t' >&2; exit 3",
                b"a\n\n\n".to_vec(),
                b" e \t".to_vec(),
                3,
                [true, true],
            ),
            (
                "printf 'a\\000b\\377c\\n'; printf '\\377\\000\\200' >&2",
                b"a\0b\xffc\n".to_vec(),
                b"\xff\0\x80".to_vec(),
                0,
                [false, false],
            ),
            (
                "printf 'crlf\\r\\n'; printf 'caf\\303\\251' >&2",
                b"crlf\r\n".to_vec(),
                "caf\u{e9}".as_bytes().to_vec(),
                0,
                [false, false],
            ),
            ("printf 'x\\000'", b"x\0".to_vec(), vec![], 0, [false, true]),
            ("seq 0 39999", big.clone(), vec![], 0, [false, true]),
            (
                "printf '%s' 'execseam-exact-stderr' ; echo; echo 'execseam-exact-end 0'",
                b"execseam-exact-stderr\nexecseam-exact-end 0\n".to_vec(),
                vec![],
                0,
                [true, true],
            ),
            ("kill -9 $$", vec![], vec![], 137, [true, true]),
        ];
        for (script, out, err, status, text) in cases {
            let cmd = Command::new(["sh", "-c", script]).unwrap();
            let (o, wire) = run_frame(&cmd, &config);
            assert_eq!(
                o,
                Output::new(out, err, Exit::Code(status)),
                "{script}: {wire}"
            );
            let parts: Vec<bool> = wire
                .lines()
                .filter(|l| *l == "b" || l.starts_with("t "))
                .map(|l| l.starts_with("t "))
                .collect();
            assert_eq!(parts, text, "{script}: text or base64 per stream");
        }
        // The frame leaves its two files for a later frame, which removes a batch of them in
        // the background; the files are private (mode 600) and the command gets the service's
        // umask, not the frame's 077.
        let cmd = Command::new(["sh", "-c", "umask"]).unwrap();
        let plan = Plan::new(&cmd, &config).unwrap();
        let sh = std::process::Command::new("bash")
            .args(["-c", "umask 0022; eval \"$0\"", &plan.command])
            .output()
            .unwrap();
        let o = plan
            .output(&result(
                &String::from_utf8_lossy(&sh.stdout),
                "",
                Some(0),
                false,
            ))
            .unwrap();
        assert_eq!(o.stdout, "0022\n");
        use std::os::unix::fs::PermissionsExt as _;
        for f in &plan.files {
            let mode = std::fs::metadata(f).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let later = Plan::removing(&cmd, &config, &plan.files).unwrap();
        let sh = std::process::Command::new("bash")
            .args(["-c", &later.command])
            .output()
            .unwrap();
        assert!(sh.status.success());
        let until = std::time::Instant::now() + Duration::from_secs(3);
        while plan.files.iter().any(|f| std::path::Path::new(f).exists()) {
            assert!(std::time::Instant::now() < until, "{:?} stay", plan.files);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(later.files.iter().all(|f| std::path::Path::new(f).exists()));
        for f in &later.files {
            let _ = std::fs::remove_file(f);
        }
    }

    #[test]
    fn one_pass_frames_that_are_cut_or_lie_are_rejected() {
        let ok =
            "execseam-exact-v2\nt 3\nabc\nexecseam-exact-stderr\nb\nZQ==\nexecseam-exact-end 2\n";
        assert_eq!(
            decode_exact_v2(ok).unwrap(),
            (b"abc".to_vec(), b"e".to_vec(), 2)
        );
        assert_eq!(
            decode_exact_v2(&format!("motd\r\n{}", ok.replace('\n', "\r\n"))).unwrap(),
            (b"abc".to_vec(), b"e".to_vec(), 2)
        );
        for bad in [
            ok.replace("t 3", "t 4"),
            ok.replace("t 3", "t 2"),
            ok.replace("ZQ==", "Z*=="),
            ok.replace("execseam-exact-end 2\n", ""),
            ok.replace("execseam-exact-stderr\n", ""),
            format!("{ok}extra\n"),
            ok.replace("t 3", "x 3"),
            String::new(),
        ] {
            assert!(decode_exact_v2(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stdin_goes_to_a_file_under_the_session_root() {
        let cmd = Command::builder(["cat"]).stdin("x").build().unwrap();
        let plan = Plan::new(&cmd, &cfg()).unwrap();
        let (rel, abs) = plan.stdin_file.clone().unwrap();
        assert!(rel.starts_with(".execseam-"), "{rel}");
        assert_eq!(abs, format!("/opt/amazon/genesis1p-tools/var/{rel}"));
        assert!(plan.command.contains(&abs));
    }

    #[test]
    fn capabilities_follow_the_configuration() {
        let default = AgentCoreConfig::new("r", "a", "b");
        assert_eq!(
            crate::CAPABILITIES,
            capabilities_for(default.exec_mode(), default.is_exact_output())
        );
        assert!(!capabilities_for(default.exec_mode(), true).remote_kill);
        assert!(capabilities_for(ExecMode::Task, true).remote_kill);
        assert!(!capabilities_for(ExecMode::Command, false).binary_output);
    }
}
