//! The tools of `InvokeCodeInterpreter`, run against a session's sandbox.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use execseam_core::{Command, Exec, Exit, Output};
use serde_json::{Value, json};

use super::wire::{self, result, text, tool_error};
use super::{SESSION_ROOT, Session, State, Task, TaskState};
use execseam_emulator_kit::Fs;

/// What a tool call produced.
pub(crate) enum Outcome {
    /// A `CodeInterpreterResult`.
    Result(Value),
    /// The session went away while the tool ran (a `resourceNotFoundException` event).
    Vanished(String),
}

/// The tool names of the model's `ToolName` enum.
pub(crate) const TOOL_NAMES: &[&str] = &[
    "executeCode",
    "executeCommand",
    "readFiles",
    "listFiles",
    "removeFiles",
    "writeFiles",
    "startCommandExecution",
    "getTask",
    "stopTask",
];

/// The fault route of a tool: `exec` for the tools that submit a command.
pub(crate) fn route_of(tool: &str) -> &'static str {
    match tool {
        "executeCommand" | "startCommandExecution" | "executeCode" => "exec",
        "getTask" | "stopTask" => "task",
        "readFiles" | "listFiles" | "removeFiles" | "writeFiles" => "files",
        _ => "invoke",
    }
}

/// A sandbox path for a path given to a files tool: relative paths are relative to the session
/// directory; `.` and `..` are resolved lexically.
pub(crate) fn resolve(path: &str) -> String {
    let joined = if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        Path::new(SESSION_ROOT).join(path)
    };
    let mut parts: Vec<String> = Vec::new();
    for c in joined.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

fn writable(path: &str) -> bool {
    State::spec()
        .private_paths()
        .iter()
        .any(|p| path == p.as_str() || path.starts_with(&format!("{}/", p.trim_end_matches('/'))))
}

fn uri(path: &str) -> String {
    format!("file:///{}", path.trim_start_matches('/'))
}

fn mime(path: &str, is_text: bool) -> &'static str {
    match Path::new(path).extension().and_then(|e| e.to_str()) {
        Some("py") => "text/x-python",
        Some("json") => "application/json",
        Some("js") => "text/javascript",
        Some("csv") => "text/csv",
        Some("html") => "text/html",
        Some("png") => "image/png",
        _ if is_text => "text/plain",
        _ => "application/octet-stream",
    }
}

/// What a pty does to output (`onlcr`): every `\n` becomes `\r\n`.
fn pty(s: &str) -> String {
    s.replace('\n', "\r\n")
}

fn exit_code(exit: Exit) -> i64 {
    match exit {
        Exit::Code(c) => i64::from(c),
        // A Python runner reports a signal death as -N.
        Exit::Signal(s) => -i64::from(s),
    }
}

/// Runs `argv` in the session directory; `Err(None)` if the session was terminated meanwhile.
async fn run(
    session: &Arc<Session>,
    argv: Vec<String>,
    vanish: bool,
) -> Result<(Output, Duration), Option<String>> {
    let cmd = Command::builder(argv)
        .workdir(session.sandbox.visible_path(SESSION_ROOT))
        .build()
        .map_err(|e| Some(e.to_string()))?;
    let sandbox = session.sandbox.clone();
    let started = Instant::now();
    let handle = tokio::spawn(async move { sandbox.exec().exec(cmd).await });
    session.sandbox.track(handle.abort_handle());
    if vanish {
        let s = session.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.terminate();
        });
    }
    match handle.await {
        Ok(Ok(o)) => Ok((o, started.elapsed())),
        Ok(Err(e)) => Err(Some(e.to_string())),
        Err(_) => Err(None),
    }
}

fn command_result(state: &State, output: &Output, elapsed: Duration) -> Value {
    let mut stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if state.pty_line_endings.load(Ordering::SeqCst) {
        stdout = pty(&stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let code = exit_code(output.exit);
    result(
        vec![text(&stdout)],
        Some(json!({
            "stdout": stdout,
            "stderr": stderr,
            "exitCode": code,
            // Seconds, as observed on the service (a captured `echo` answered 0.00498; the
            // fixtures in adapter-agentcore/tests/agentcore.rs), although the model documents
            // milliseconds: the observation wins for commands.
            "executionTime": elapsed.as_secs_f64(),
        })),
        code != 0,
    )
}

/// The task the `taskId` argument names, or the tool error to answer.
fn named_task<'a>(session: &Session, args: &'a Value) -> Result<(&'a str, Arc<Task>), Value> {
    let Some(id) = arg_str(args, "taskId") else {
        return Err(tool_error("The 'taskId' argument is required"));
    };
    match session.tasks.lock().expect("tasks").get(id) {
        Some(task) => Ok((id, task.clone())),
        None => Err(tool_error(&format!("Task not found: {id}"))),
    }
}

/// `getTask`'s answer for a task that ended without its command's output (canceled, or failed
/// to start).
fn ended_task(message: &str, id: &str, status: &str, is_error: bool) -> Value {
    result(
        vec![text(message)],
        Some(json!({ "taskId": id, "taskStatus": status, "stdout": "", "stderr": "" })),
        is_error,
    )
}

fn arg_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn arg_paths(args: &Value) -> Vec<String> {
    args.get("paths")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Runs one tool.
pub(crate) async fn run_tool(
    state: &State,
    session: &Arc<Session>,
    tool: &str,
    args: &Value,
    vanish: bool,
) -> Outcome {
    if vanish && route_of(tool) != "exec" {
        session.terminate();
        return Outcome::Vanished(format!("Session {} was terminated", session.id));
    }
    match tool {
        "executeCommand" => {
            let Some(command) = arg_str(args, "command") else {
                return Outcome::Result(tool_error("The 'command' argument is required"));
            };
            let argv = vec![bash(), "-c".to_owned(), command.to_owned()];
            match run(session, argv, vanish).await {
                Ok((o, t)) => Outcome::Result(command_result(state, &o, t)),
                Err(None) => Outcome::Vanished(format!(
                    "Session {} was terminated while the command ran",
                    session.id
                )),
                Err(Some(m)) => Outcome::Result(tool_error(&m)),
            }
        }
        "executeCode" => {
            let Some(code) = arg_str(args, "code") else {
                return Outcome::Result(tool_error("The 'code' argument is required"));
            };
            let language = arg_str(args, "language").unwrap_or("python");
            if !matches!(language, "python" | "javascript" | "typescript") {
                return Outcome::Result(tool_error(&format!(
                    "Unsupported language {language:?} (python, javascript, typescript)"
                )));
            }
            if super::kernel::argv(language, session.esbuild.as_deref()).is_none() {
                return Outcome::Result(tool_error(&format!(
                    "language {language:?} is not emulated here: TypeScript needs esbuild \
                     (AgentCoreOptions::esbuild, or EXECSEAM_AGENTCORE_ESBUILD)"
                )));
            }
            let clear = args
                .get("clearContext")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if vanish {
                let s = session.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    s.terminate();
                });
            }
            let started = Instant::now();
            let cell = super::kernel::execute(session, language, code, clear).await;
            if session.status() == super::SessionStatus::Terminated {
                return Outcome::Vanished(format!("Session {} was terminated", session.id));
            }
            match cell {
                Ok(cell) => {
                    // Code output is not a pty's.
                    let r = result(
                        vec![text(&cell.stdout)],
                        Some(json!({
                            "stdout": cell.stdout,
                            "stderr": cell.stderr,
                            "exitCode": cell.exit_code,
                            // Milliseconds, as the model documents (no capture of
                            // executeCode's executionTime exists to say otherwise).
                            "executionTime": started.elapsed().as_secs_f64() * 1000.0,
                        })),
                        cell.exit_code != 0,
                    );
                    Outcome::Result(r)
                }
                Err(m) => Outcome::Result(tool_error(&m)),
            }
        }
        "startCommandExecution" => {
            let Some(command) = arg_str(args, "command") else {
                return Outcome::Result(tool_error("The 'command' argument is required"));
            };
            let id = start_task(state, session, command.to_owned());
            if vanish {
                let s = session.clone();
                tokio::time::sleep(Duration::from_millis(300)).await;
                s.terminate();
                return Outcome::Vanished(format!("Session {} was terminated", session.id));
            }
            Outcome::Result(result(
                vec![text("Successfully started a command execution task")],
                Some(
                    json!({ "taskId": id, "taskStatus": "submitted", "stdout": "", "stderr": "" }),
                ),
                false,
            ))
        }
        "getTask" => {
            let (id, task) = match named_task(session, args) {
                Ok(found) => found,
                Err(e) => return Outcome::Result(e),
            };
            let st = task.state.lock().expect("task").clone();
            Outcome::Result(match st {
                TaskState::Working => result(
                    vec![text("Task is working")],
                    Some(json!({ "taskStatus": "working", "stdout": "", "stderr": "" })),
                    false,
                ),
                TaskState::Done { output, elapsed } => {
                    let mut r = command_result(state, &output, elapsed);
                    let failed = !output.exit.success();
                    r["structuredContent"]["taskId"] = Value::String(id.to_owned());
                    r["structuredContent"]["taskStatus"] =
                        Value::String(if failed { "failed" } else { "completed" }.to_owned());
                    r
                }
                TaskState::Canceled => ended_task("Task is canceled", id, "canceled", false),
                TaskState::Failed { message } => ended_task(&message, id, "failed", true),
            })
        }
        "stopTask" => {
            let (_, task) = match named_task(session, args) {
                Ok(found) => found,
                Err(e) => return Outcome::Result(e),
            };
            let mut st = task.state.lock().expect("task");
            if matches!(*st, TaskState::Working) {
                if let Some(h) = task.abort.lock().expect("abort").take() {
                    h.abort(); // drops the exec future: the process group is killed
                }
                *st = TaskState::Canceled;
                Outcome::Result(result(
                    vec![text("Successfully canceled a command execution task")],
                    None,
                    false,
                ))
            } else {
                let what = match &*st {
                    TaskState::Canceled => "canceled",
                    TaskState::Failed { .. } => "failed",
                    _ => "completed",
                };
                Outcome::Result(result(
                    vec![text(&format!("Task is already {what}"))],
                    None,
                    false,
                ))
            }
        }
        "writeFiles" => Outcome::Result(file_tool(session, args, write_files)),
        "readFiles" => Outcome::Result(file_tool(session, args, read_files)),
        "listFiles" => Outcome::Result(file_tool(session, args, list_files)),
        "removeFiles" => Outcome::Result(file_tool(session, args, remove_files)),
        other => Outcome::Result(tool_error(&format!("Unknown tool {other}"))),
    }
}

fn bash() -> String {
    if Path::new("/bin/bash").exists() {
        "/bin/bash".to_owned()
    } else {
        "/bin/sh".to_owned()
    }
}

fn start_task(_state: &State, session: &Arc<Session>, command: String) -> String {
    let id = wire::uuid();
    let task = Arc::new(Task {
        state: Mutex::new(TaskState::Working),
        abort: Mutex::new(None),
    });
    let cmd = Command::builder([bash(), "-c".to_owned(), command])
        .workdir(session.sandbox.visible_path(SESSION_ROOT))
        .build();
    let sandbox = session.sandbox.clone();
    let t = task.clone();
    let handle = tokio::spawn(async move {
        let started = Instant::now();
        let next = match cmd {
            Ok(cmd) => match sandbox.exec().exec(cmd).await {
                Ok(output) => TaskState::Done {
                    output,
                    elapsed: started.elapsed(),
                },
                Err(e) => TaskState::Failed {
                    message: e.to_string(),
                },
            },
            Err(e) => TaskState::Failed {
                message: e.to_string(),
            },
        };
        let mut st = t.state.lock().expect("task");
        if matches!(*st, TaskState::Working) {
            *st = next;
        }
    });
    session.sandbox.track(handle.abort_handle());
    *task.abort.lock().expect("abort") = Some(handle.abort_handle());
    session
        .tasks
        .lock()
        .expect("tasks")
        .insert(id.clone(), task);
    id
}

/// Runs a files tool's work as the service's tools run: inside the session's sandbox, as its
/// user (`genesis1ptools`), so permissions and new files' owners are that user's.
fn as_tools<T, F>(session: &Session, f: F) -> std::io::Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Fs) -> std::io::Result<T> + Send + 'static,
{
    session.sandbox.fs_blocking_as(session.sandbox.user(), f)
}

/// A files tool (`write_files` ...) run in the session's sandbox as its user.
fn file_tool(session: &Session, args: &Value, tool: fn(&Fs, &Value) -> Value) -> Value {
    let args = args.clone();
    as_tools(session, move |fs| Ok(tool(fs, &args)))
        .unwrap_or_else(|e| tool_error(&format!("The session's sandbox is unreachable: {e}")))
}

fn write_files(fs: &Fs, args: &Value) -> Value {
    let Some(items) = args.get("content").and_then(Value::as_array) else {
        return tool_error("The 'content' argument is required");
    };
    for item in items {
        let Some(path) = item.get("path").and_then(Value::as_str) else {
            return tool_error("Each content item needs a 'path'");
        };
        let data = if let Some(b) = item.get("blob").and_then(Value::as_str) {
            match B64.decode(b) {
                Ok(d) => d,
                Err(e) => return tool_error(&format!("Invalid blob for {path}: {e}")),
            }
        } else {
            item.get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .as_bytes()
                .to_vec()
        };
        let full = resolve(path);
        if !writable(&full) {
            return tool_error(&format!("Permission denied: {path}"));
        }
        let host = fs.path(&full);
        if let Some(dir) = host.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            return tool_error(&format!("Failed to write {path}: {e}"));
        }
        if let Err(e) = std::fs::write(&host, data) {
            return tool_error(&format!("Failed to write {path}: {e}"));
        }
    }
    result(
        vec![text(&format!(
            "Successfully wrote all {} files",
            items.len()
        ))],
        None,
        false,
    )
}

fn read_files(fs: &Fs, args: &Value) -> Value {
    let paths = arg_paths(args);
    if paths.is_empty() {
        return tool_error("The 'paths' argument is required");
    }
    let mut content = Vec::new();
    for path in &paths {
        let full = resolve(path);
        let host = fs.path(&full);
        match std::fs::read(&host) {
            Ok(bytes) => {
                // No `type` in the resource: the service omits it (observed), though the model
                // marks it required.
                let resource = match String::from_utf8(bytes) {
                    Ok(s) => json!({ "uri": uri(path), "mimeType": mime(path, true), "text": s }),
                    Err(e) => json!({
                        "uri": uri(path),
                        "mimeType": mime(path, false),
                        "blob": B64.encode(e.into_bytes()),
                    }),
                };
                content.push(json!({ "type": "resource", "resource": resource }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return tool_error(&format!("File not found: {path}"));
            }
            Err(e) => return tool_error(&format!("Failed to read {path}: {e}")),
        }
    }
    result(content, None, false)
}

fn list_files(fs: &Fs, args: &Value) -> Value {
    let given = arg_str(args, "directoryPath")
        .or_else(|| arg_str(args, "path"))
        .unwrap_or("");
    let full = resolve(given);
    let host = fs.path(&full);
    let rd = match std::fs::read_dir(&host) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return tool_error(&format!("Directory not found: {given}"));
        }
        Err(e) => return tool_error(&format!("Failed to list {given}: {e}")),
    };
    let base = given.trim_matches('/').trim_start_matches("./");
    let base = if base == "." { "" } else { base };
    let mut content = Vec::new();
    // Directory order, unsorted: ordering is the client's business.
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if base.is_empty() {
            name.clone()
        } else {
            format!("{base}/{name}")
        };
        let meta = entry.metadata().ok();
        let is_dir = meta.as_ref().is_some_and(std::fs::Metadata::is_dir);
        let mut block = json!({
            "type": "resource_link",
            "uri": uri(&rel),
            "name": name,
            "description": if is_dir { "Directory" } else { "File" },
        });
        if !is_dir {
            block["mimeType"] = Value::String(mime(&name, true).to_owned());
            if let Some(m) = &meta {
                block["size"] = json!(m.len());
            }
        }
        content.push(block);
    }
    result(content, None, false)
}

fn remove_files(fs: &Fs, args: &Value) -> Value {
    let paths = arg_paths(args);
    if paths.is_empty() {
        return tool_error("The 'paths' argument is required");
    }
    for path in &paths {
        let full = resolve(path);
        if !writable(&full) {
            return tool_error(&format!("Permission denied: {path}"));
        }
        let host = fs.path(&full);
        let r = if host.is_dir() {
            std::fs::remove_dir_all(&host)
        } else {
            std::fs::remove_file(&host)
        };
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return tool_error(&format!("File not found: {path}"));
            }
            Err(e) => return tool_error(&format!("Failed to remove {path}: {e}")),
        }
    }
    result(
        vec![text(&format!(
            "Successfully removed all {} files",
            paths.len()
        ))],
        None,
        false,
    )
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn paths_resolve_against_the_session_directory() {
        assert_eq!(resolve("data.txt"), format!("{SESSION_ROOT}/data.txt"));
        assert_eq!(resolve(""), SESSION_ROOT);
        assert_eq!(resolve("."), SESSION_ROOT);
        assert_eq!(resolve("/tmp/x"), "/tmp/x");
        assert_eq!(resolve("a/../../x"), "/opt/amazon/genesis1p-tools/x");
        assert!(!writable(&resolve("../../etc/passwd")));
        assert!(writable(&resolve("sub/f")));
        assert!(writable("/tmp/f"));
        assert!(!writable("/tmpx/f"));
    }

    #[test]
    fn pty_line_endings() {
        assert_eq!(pty("a\nb\n"), "a\r\nb\r\n");
    }
}
