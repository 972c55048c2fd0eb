//! The [`Exec`] implementation: session lifecycle, the command string, the two exec modes, the
//! exact-output framing, and the files tools.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_bedrockagentcore::types::{ContentBlockType, InputContentBlock, ToolArguments};
use aws_smithy_types::Blob;
use bytes::Bytes;
use execseam_core::degrade::{self, StdinFrom, WrapOptions};
use execseam_core::{
    BoxFuture, Capabilities, Command, Delivery, Error, ErrorKind, Exec, Exit, Output, Ownership,
    Retry, Sandbox, gone_is_destroyed,
};

use crate::PROVIDER;
use crate::client::Client;
use crate::config::{AgentCoreConfig, ExecMode};
use crate::error::{self, Op};
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
    }
}

/// The first line of an exact-output frame.
const EXACT_BEGIN: &str = "execseam-exact-v1";
/// The line between the base64 of stdout and the base64 of stderr.
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
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let sid = self.session_id.clone();
            handle.spawn(async move {
                if let Err(e) = client.stop_session(&sid).await {
                    tracing::debug!(error = %e, "agentcore: stopping the session on drop failed");
                }
            });
        }
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

    /// Stops the session (StopCodeInterpreterSession); one that is already gone is `Ok`.
    /// Commands still running in it are ended by the service.
    pub async fn stop_session(&self) -> Result<(), Error> {
        let r = gone_is_destroyed(self.inner.client.stop_session(&self.inner.session_id).await);
        if r.is_ok() {
            self.inner.ownership.mark_destroyed();
        }
        r
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
            .write(Op::WriteFiles, &self.files_path(path), data.into())
            .await
    }

    /// Reads `path` with `readFiles` (a `text` or `blob` resource).
    pub async fn read_file(&self, path: &str) -> Result<Bytes, Error> {
        let args = ToolArguments::builder()
            .set_paths(Some(vec![self.files_path(path)]))
            .build();
        let r = self
            .inner
            .invoke(Op::ReadFiles, tool::read_files(), args)
            .await?;
        if r.is_error {
            return Err(file_error(Op::ReadFiles, path, &r));
        }
        let resource = r
            .content
            .iter()
            .find(|b| b.r#type() == &ContentBlockType::EmbeddedResource)
            .and_then(|b| b.resource());
        match resource.and_then(wire::resource_bytes) {
            Some(bytes) => Ok(Bytes::from(bytes)),
            None => Err(error::protocol(
                Op::ReadFiles,
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
            .invoke(Op::ListFiles, tool::list_files(), args)
            .await?;
        if r.is_error {
            return Err(file_error(Op::ListFiles, dir, &r));
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
            .invoke(Op::RemoveFiles, tool::remove_files(), args)
            .await?;
        if r.is_error {
            return Err(file_error(Op::RemoveFiles, &paths.join(" "), &r));
        }
        Ok(())
    }
}

fn file_error(op: Op, path: &str, r: &ToolResult) -> Error {
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
    /// (the path given to writeFiles, the absolute path the wrapper reads) of the stdin file.
    stdin_file: Option<(String, String)>,
    exact: bool,
}

impl Plan {
    fn new(cmd: &Command, config: &AgentCoreConfig) -> Result<Plan, Error> {
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
        let wrapped =
            degrade::wrapped_command(cmd, &opts).map_err(|e| e.or_context(PROVIDER, "exec"))?;
        // `/bin/sh -c '<script>'`, with stdin at EOF unless the script redirects it: the service's
        // own stdin is not an empty pipe.
        let inner = format!("{} </dev/null", degrade::join(wrapped.argv()));
        let command = if config.exact_output {
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
        };
        Ok(Plan {
            command,
            stdin_file,
            exact: config.exact_output,
        })
    }

    /// The command's [`Output`] from the result of the invocation that ran it.
    fn output(&self, r: &ToolResult) -> Result<Output, Error> {
        let code = match r.exit_codes.as_slice() {
            [c] => Some(*c),
            [] => None,
            many => {
                return Err(error::protocol(
                    Op::Submit,
                    format!("the result carries {} exit codes: {many:?}", many.len()),
                ));
            }
        };
        let stdout = r.stdout.as_deref().unwrap_or_default();
        let stderr = r.stderr.as_deref().unwrap_or_default();
        if self.exact {
            let decoded = decode_exact(stdout);
            let (out, err, status) = match decoded {
                Ok(d) => d,
                Err(why) if r.is_error && code.is_none() => {
                    return Err(error::tool_error(
                        Op::Submit,
                        ErrorKind::Internal,
                        format!(
                            "the command failed without a result ({why}): {}",
                            r.message()
                        ),
                    ));
                }
                Err(why) => {
                    return Err(error::protocol(
                        Op::Submit,
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
                    Op::Submit,
                    format!("exitCode {c} disagrees with the wrapper's status {status}"),
                ));
            }
            if r.is_error && status == 0 {
                return Err(error::tool_error(
                    Op::Submit,
                    ErrorKind::Internal,
                    format!("isError with exit status 0: {}", r.message()),
                ));
            }
            let output = Output::new(out, err, Exit::Code(status));
            return degrade::check_wrapped(output).map_err(|e| e.or_context(PROVIDER, "exec"));
        }
        let Some(code) = code else {
            if r.is_error {
                return Err(error::tool_error(
                    Op::Submit,
                    ErrorKind::Internal,
                    format!("the command failed without an exit code: {}", r.message()),
                ));
            }
            return Err(error::protocol(
                Op::Submit,
                "the result has no structuredContent.exitCode",
            ));
        };
        if r.is_error && code == 0 {
            return Err(error::tool_error(
                Op::Submit,
                ErrorKind::Internal,
                format!("isError with exitCode 0: {}", r.message()),
            ));
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
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(task = %self.task_id, "agentcore: no runtime to stop the task");
            return;
        };
        let client = self.client.clone();
        let sid = self.session_id.clone();
        let task = self.task_id.clone();
        handle.spawn(async move {
            let args = ToolArguments::builder().task_id(task.clone()).build();
            match client
                .invoke(Op::StopTask, &sid, tool::stop_task(), args)
                .await
            {
                Ok(_) => tracing::debug!(%task, "agentcore: task stopped"),
                Err(e) => tracing::debug!(%task, error = %e, "agentcore: stopTask failed"),
            }
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
        op: Op,
        tool: aws_sdk_bedrockagentcore::types::ToolName,
        args: ToolArguments,
    ) -> Result<ToolResult, Error> {
        self.client.invoke(op, &self.session_id, tool, args).await
    }

    async fn write(&self, op: Op, path: &str, data: Bytes) -> Result<(), Error> {
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
        execseam_core::transport::check_size(PROVIDER, &cmd, &crate::SIZE_LIMIT)?;
        let plan = Plan::new(&cmd, &self.config)?;
        // What counts is the `bash -c` string as sent: the wrapper, quoted twice.
        execseam_core::transport::check_wire(PROVIDER, &[&plan.command], &crate::SIZE_LIMIT)?;
        if let Some((rel, _)) = &plan.stdin_file {
            self.write(Op::WriteFiles, rel, cmd.stdin().clone())
                .await
                .map_err(|e| e.with_operation("exec"))?;
        }
        let result = match self.config.mode {
            ExecMode::Command => {
                let args = ToolArguments::builder()
                    .command(plan.command.clone())
                    .build();
                self.invoke(Op::Submit, tool::execute_command(), args).await
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
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let inner = self.clone();
            handle.spawn(async move {
                let args = ToolArguments::builder().set_paths(Some(vec![rel])).build();
                let _ = inner
                    .invoke(Op::RemoveFiles, tool::remove_files(), args)
                    .await;
            });
        }
    }

    async fn run_task(&self, command: &str) -> Result<ToolResult, Error> {
        let args = ToolArguments::builder().command(command).build();
        let started = self
            .invoke(Op::Submit, tool::start_command_execution(), args)
            .await?;
        let Some(task_id) = started.task_id.clone() else {
            if started.is_error {
                return Err(error::tool_error(
                    Op::Submit,
                    ErrorKind::Internal,
                    format!("startCommandExecution failed: {}", started.message()),
                ));
            }
            return Err(error::protocol(
                Op::Submit,
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
            return Err(error::tool_error(
                Op::Submit,
                ErrorKind::Internal,
                format!("startCommandExecution failed: {}", started.message()),
            ));
        }
        let mut delay = Duration::from_millis(10);
        loop {
            let args = ToolArguments::builder().task_id(task_id.clone()).build();
            let r = self
                .invoke(Op::Poll, tool::get_task(), args)
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
                        Op::Submit,
                        format!("getTask returned an unknown taskStatus {other:?}"),
                    ));
                }
                None if !r.exit_codes.is_empty() => {
                    guard.armed = false;
                    return Ok(r);
                }
                None => {
                    return Err(error::protocol(
                        Op::Submit,
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
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        capabilities_for(self.inner.config.mode, self.inner.config.exact_output)
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let span = tracing::debug_span!("exec", provider = self.provider(), operation = "exec", tool = %command.tool());
        let fut = Box::pin(self.inner.clone().run(command));
        // One span per exec: the provider, the operation and the tool, never argv, env or stdin.
        Box::pin(tracing::Instrument::instrument(fut, span))
    }
}

impl Sandbox for AgentCoreExec {
    fn id(&self) -> &str {
        &self.inner.session_id
    }

    fn owned(&self) -> bool {
        self.inner.ownership.owned()
    }

    fn set_owned(&self, owned: bool) {
        self.inner.ownership.set_owned(owned);
    }

    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let o = &self.inner.ownership;
            if o.begin_close() && o.owned() && !o.is_destroyed() {
                self.stop_session().await?;
            }
            Ok(())
        })
    }

    fn destroy(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.stop_session())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::degrade::base64_encode;

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

    #[test]
    fn exact_results_cross_check_the_exit_code() {
        let cmd = Command::new(["true"]).unwrap();
        let plan = Plan::new(&cmd, &cfg()).unwrap();
        let text = frame(b"out", b"err", 4, false);
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
