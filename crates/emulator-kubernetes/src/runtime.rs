//! A model of agent-sandbox's legacy runtime (`examples/python-runtime-sandbox/main.py` at
//! `2fd412d`), which the `k8s-agent-sandbox` SDK's commands and files talk to through the router
//! on port 8888. Its semantics, not execseam's:
//!
//! - `POST /execute {"command"}`: `shlex.split`, no shell, in the base directory
//!   (`SANDBOX_BASE_DIR`, else `/app`), a new session, stdout and stderr decoded as strict UTF-8
//!   text with universal newlines; always HTTP 200 `{"stdout","stderr","exit_code"}`; anything
//!   raised (a program that does not exist, a quote left open, the 300 s timeout, output that is
//!   not UTF-8) is `exit_code: 1`, `stdout: ""`, `stderr: "Failed to execute command: <Python's
//!   text>"`; a signal is Python's negative return code.
//! - `POST /upload` (multipart `file`; its filename is the destination, relative to the base),
//!   `GET /download/<path>`, `/list/<path>`, `/exists/<path>`: paths decoded twice (uvicorn, then
//!   `urllib.parse.unquote`), confined to the base directory (`403 {"message":"Access
//!   denied"}`), the texts and codes of `main.py`.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::pods::PodRun;

fn json_response(code: u16, v: &Value) -> Response {
    let mut r = (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        v.to_string(),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `urllib.parse.unquote` (and uvicorn's path decoding): `%XX` escapes, UTF-8, invalid bytes
/// replaced.
pub fn unquote(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (
                (b[i + 1] as char).to_digit(16),
                (b[i + 2] as char).to_digit(16),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Python's `shlex.split` (POSIX mode, no comments).
pub fn shlex_split(s: &str) -> Result<Vec<String>, &'static str> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_token = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_token {
                    out.push(std::mem::take(&mut cur));
                    in_token = false;
                }
            }
            '\\' => {
                in_token = true;
                match chars.next() {
                    Some(n) => cur.push(n),
                    None => return Err("No escaped character"),
                }
            }
            '\'' => {
                in_token = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(n) => cur.push(n),
                        None => return Err("No closing quotation"),
                    }
                }
            }
            '"' => {
                in_token = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(n @ ('"' | '\\')) => cur.push(n),
                            Some(n) => {
                                cur.push('\\');
                                cur.push(n);
                            }
                            None => return Err("No closing quotation"),
                        },
                        Some(n) => cur.push(n),
                        None => return Err("No closing quotation"),
                    }
                }
            }
            c => {
                in_token = true;
                cur.push(c);
            }
        }
    }
    if in_token {
        out.push(cur);
    }
    Ok(out)
}

/// Python's `repr` of a list of strings (`['sleep', '400']`).
fn py_list(args: &[String]) -> String {
    let items: Vec<String> = args
        .iter()
        .map(|a| {
            if a.contains('\'') && !a.contains('"') {
                format!("\"{a}\"")
            } else {
                format!("'{}'", a.replace('\\', "\\\\").replace('\'', "\\'"))
            }
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Python's `str(float)` for the timeout.
fn py_float(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

/// Universal newlines: `\r\n` and `\r` become `\n`.
fn universal(s: String) -> String {
    if s.contains('\r') {
        s.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        s
    }
}

fn decode(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map(universal).map_err(|e| {
        let pos = e.utf8_error().valid_up_to();
        let byte = e.as_bytes()[pos];
        let why = if e.utf8_error().error_len().is_none() {
            "unexpected end of data"
        } else if (0x80..0xc0).contains(&byte) || byte >= 0xf8 {
            "invalid start byte"
        } else {
            "invalid continuation byte"
        };
        format!("'utf-8' codec can't decode byte 0x{byte:02x} in position {pos}: {why}")
    })
}

/// The runtime's base directory.
fn base_dir(run: &PodRun) -> String {
    run.container(None)
        .and_then(|c| c.env.get("SANDBOX_BASE_DIR"))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/app".to_owned())
}

fn exec_timeout(run: &PodRun) -> f64 {
    run.container(None)
        .and_then(|c| c.env.get("SANDBOX_EXEC_TIMEOUT_SECONDS"))
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .unwrap_or(300.0)
}

/// The port the runtime listens on (`main.py`: uvicorn on 8888).
pub const PORT: u16 = 8888;

/// The runtime as the HTTP service its pod listens on (reached through a port-forward).
pub fn http(run: Arc<PodRun>) -> axum::Router {
    axum::Router::new().fallback(move |request: axum::extract::Request| {
        let run = run.clone();
        async move {
            let method = request.method().clone();
            let raw = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default();
            let headers = request.headers().clone();
            match axum::body::to_bytes(request.into_body(), usize::MAX).await {
                Ok(body) => handle(run, method, &raw, &headers, body).await,
                Err(_) => StatusCode::BAD_REQUEST.into_response(),
            }
        }
    })
}

/// Serves one request of the runtime on port 8888.
pub async fn handle(
    run: Arc<PodRun>,
    method: Method,
    raw_path: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    // uvicorn decodes the path once; routing matches on that.
    let path = unquote(raw_path.split('?').next().unwrap_or(""));
    let not_found = || json_response(404, &json!({"detail": "Not Found"}));
    let not_allowed = || json_response(405, &json!({"detail": "Method Not Allowed"}));
    if path == "/" {
        return match method {
            Method::GET => json_response(
                200,
                &json!({"status": "ok", "message": "Sandbox Runtime is active."}),
            ),
            _ => not_allowed(),
        };
    }
    if path == "/execute" {
        return match method {
            Method::POST => execute(run, &body).await,
            _ => not_allowed(),
        };
    }
    if path == "/upload" {
        return match method {
            Method::POST => upload(run, headers, body).await,
            _ => not_allowed(),
        };
    }
    for (prefix, f) in [("/download/", 0), ("/list/", 1), ("/exists/", 2)] {
        if let Some(rest) = path.strip_prefix(prefix) {
            if method != Method::GET {
                return not_allowed();
            }
            // main.py unquotes what uvicorn already decoded.
            let decoded = unquote(rest);
            return match f {
                0 => download(run, decoded).await,
                1 => list(run, decoded).await,
                _ => exists(run, decoded).await,
            };
        }
    }
    not_found()
}

async fn execute(run: Arc<PodRun>, body: &[u8]) -> Response {
    let command = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["command"].as_str().map(str::to_owned));
    let Some(command) = command else {
        return json_response(
            422,
            &json!({"detail": [{"type": "missing", "loc": ["body", "command"], "msg": "Field required", "input": null}]}),
        );
    };
    let failed = |m: String| {
        json_response(
            200,
            &json!({"stdout": "", "stderr": format!("Failed to execute command: {m}"), "exit_code": 1}),
        )
    };
    let args = match shlex_split(&command) {
        Ok(a) => a,
        Err(e) => return failed(e.into()),
    };
    if args.is_empty() {
        return failed("list index out of range".into());
    }
    let Some(container) = run.container(None).cloned() else {
        return failed("the pod has no containers".into());
    };
    let base = base_dir(&run);
    let timeout = exec_timeout(&run);
    let mut cmd = tokio::process::Command::new(&args[0]);
    let mut env = container.env.clone();
    env.entry("HOME".into())
        .or_insert_with(|| container.user.home.clone());
    cmd.args(&args[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = match run.sandbox.spawn(cmd, &container.user, &base).await {
        Ok(c) => c,
        Err(execseam_spawn::SpawnError::Workdir(_)) => {
            return failed(format!("[Errno 2] No such file or directory: '{base}'"));
        }
        Err(execseam_spawn::SpawnError::Io(e)) => {
            let (errno, text) = match e.kind() {
                std::io::ErrorKind::NotFound => (2, "No such file or directory"),
                std::io::ErrorKind::PermissionDenied => (13, "Permission denied"),
                _ => return failed(e.to_string()),
            };
            return failed(format!("[Errno {errno}] {text}: '{}'", args[0]));
        }
    };
    let host_pid = child.host_pid;
    let mut child = child.child;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let work = async {
        let mut o = Vec::new();
        let mut e = Vec::new();
        let (_, _) = tokio::join!(out.read_to_end(&mut o), err.read_to_end(&mut e));
        let status = child.wait().await;
        (o, e, status)
    };
    let (o, e, status) = match tokio::time::timeout(Duration::from_secs_f64(timeout), work).await {
        Ok(r) => r,
        Err(_) => {
            // `os.killpg(SIGKILL)` on the new session's group.
            let _ = run.sandbox.signal_group(host_pid, libc::SIGKILL);
            return failed(format!(
                "Command '{}' timed out after {} seconds",
                py_list(&args),
                py_float(timeout)
            ));
        }
    };
    let code = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt as _;
            s.code().unwrap_or_else(|| -s.signal().unwrap_or(0))
        }
        Err(e) => return failed(e.to_string()),
    };
    let (stdout, stderr) = match (decode(o), decode(e)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(m), _) | (_, Err(m)) => return failed(m),
    };
    json_response(
        200,
        &json!({"stdout": stdout, "stderr": stderr, "exit_code": code}),
    )
}

/// `os.path.normpath` of an absolute path.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// `get_safe_path`: the path under the base directory, or `None` (403) when it leaves it. Runs
/// inside the sandbox's filesystem view (`realpath` resolves links there).
fn safe_path(
    fs: &execseam_emulator_kit::Fs,
    base: &str,
    file_path: &str,
) -> Option<(String, PathBuf)> {
    let realpath = |p: &Path| -> PathBuf {
        let mut acc = PathBuf::from("/");
        for c in normalize(p).components().skip(1) {
            acc.push(c);
            if let Ok(target) = std::fs::read_link(fs.path(&acc.to_string_lossy())) {
                acc = if target.is_absolute() {
                    normalize(&target)
                } else {
                    normalize(&acc.parent().unwrap_or(Path::new("/")).join(target))
                };
            }
        }
        acc
    };
    let base_real = realpath(Path::new(base));
    let clean = file_path.trim_start_matches('/');
    let full = realpath(&base_real.join(clean));
    if !full.starts_with(&base_real) {
        return None;
    }
    let s = full.to_string_lossy().into_owned();
    let host = fs.path(&s);
    Some((s, host))
}

fn access_denied() -> Response {
    json_response(403, &json!({"message": "Access denied"}))
}

async fn upload(run: Arc<PodRun>, headers: &HeaderMap, body: Bytes) -> Response {
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok());
    let missing = || {
        json_response(
            422,
            &json!({"detail": [{"type": "missing", "loc": ["body", "file"], "msg": "Field required", "input": null}]}),
        )
    };
    let Some(boundary) = boundary else {
        return missing();
    };
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut mp = multer::Multipart::new(stream, boundary);
    let mut found = None;
    while let Ok(Some(field)) = mp.next_field().await {
        if field.name() == Some("file") {
            let name = field.file_name().unwrap_or("").to_owned();
            match field.bytes().await {
                Ok(b) => found = Some((name, b)),
                Err(e) => {
                    return json_response(
                        500,
                        &json!({"message": format!("File upload failed: {e}")}),
                    );
                }
            }
            break;
        }
    }
    let Some((filename, data)) = found else {
        return missing();
    };
    let Some(container) = run.container(None).cloned() else {
        return missing();
    };
    let base = base_dir(&run);
    let name = filename.clone();
    let user = container.user.clone();
    let r = run
        .sandbox
        .fs_as(&container.user, move |fs| {
            let Some((sandbox_path, host)) = safe_path(fs, &base, &name) else {
                return Ok(None);
            };
            if let Some(parent) = Path::new(&sandbox_path).parent() {
                fs.create_dir_all_as(&parent.to_string_lossy(), &user)?;
            }
            std::fs::write(&host, &data)?;
            Ok(Some(()))
        })
        .await;
    match r {
        Ok(Some(())) => json_response(
            200,
            &json!({"message": format!("File '{filename}' uploaded successfully.")}),
        ),
        Ok(None) => access_denied(),
        Err(e) => json_response(
            500,
            &json!({"message": format!("File upload failed: {}", py_os_error(&e))}),
        ),
    }
}

/// An OS error as Python prints it (`[Errno 13] Permission denied: …` without the path).
fn py_os_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!(
            "[Errno {n}] {}",
            e.to_string().split(" (os error").next().unwrap_or("")
        ),
        None => e.to_string(),
    }
}

async fn download(run: Arc<PodRun>, decoded: String) -> Response {
    let Some(container) = run.container(None).cloned() else {
        return access_denied();
    };
    let base = base_dir(&run);
    let path = decoded.clone();
    let r = run
        .sandbox
        .fs_as(&container.user, move |fs| {
            let Some((_, host)) = safe_path(fs, &base, &path) else {
                return Ok(Err(403));
            };
            if !host.is_file() {
                return Ok(Err(404));
            }
            std::fs::read(&host).map(Ok)
        })
        .await;
    match r {
        Ok(Ok(data)) => {
            let mut resp = Response::new(Body::from(data));
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            let file_name = Path::new(&decoded)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let disposition = if file_name.is_ascii() {
                format!("attachment; filename=\"{file_name}\"")
            } else {
                format!(
                    "attachment; filename*=utf-8''{}",
                    crate::router::quote(&file_name)
                )
            };
            if let Ok(v) = HeaderValue::from_str(&disposition) {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
            resp
        }
        Ok(Err(403)) => access_denied(),
        Ok(Err(_)) => json_response(404, &json!({"message": "File not found"})),
        Err(e) => json_response(500, &json!({"message": py_os_error(&e)})),
    }
}

async fn list(run: Arc<PodRun>, decoded: String) -> Response {
    let Some(container) = run.container(None).cloned() else {
        return access_denied();
    };
    let base = base_dir(&run);
    let r = run
        .sandbox
        .fs_as(&container.user, move |fs| {
            let Some((_, host)) = safe_path(fs, &base, &decoded) else {
                return Ok(Err(403));
            };
            if !host.is_dir() {
                return Ok(Err(404));
            }
            let mut entries = Vec::new();
            for e in std::fs::read_dir(&host)? {
                let e = e?;
                let meta = std::fs::metadata(e.path())?;
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0.0, |d| d.as_secs_f64());
                entries.push(json!({
                    "name": e.file_name().to_string_lossy(),
                    "size": meta.len(),
                    "type": if meta.is_dir() { "directory" } else { "file" },
                    "mod_time": mtime,
                }));
            }
            Ok(Ok(entries))
        })
        .await;
    match r {
        Ok(Ok(entries)) => json_response(200, &Value::Array(entries)),
        Ok(Err(403)) => access_denied(),
        Ok(Err(_)) => json_response(404, &json!({"message": "Path is not a directory"})),
        Err(e) => json_response(
            500,
            &json!({"message": format!("List files failed: {}", py_os_error(&e))}),
        ),
    }
}

async fn exists(run: Arc<PodRun>, decoded: String) -> Response {
    let Some(container) = run.container(None).cloned() else {
        return access_denied();
    };
    let base = base_dir(&run);
    let path = decoded.clone();
    let r = run
        .sandbox
        .fs_as(&container.user, move |fs| {
            Ok(safe_path(fs, &base, &path).map(|(_, host)| host.exists()))
        })
        .await;
    match r {
        Ok(Some(exists)) => json_response(200, &json!({"path": decoded, "exists": exists})),
        Ok(None) => access_denied(),
        Err(e) => json_response(500, &json!({"message": py_os_error(&e)})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shlex_as_python_splits() {
        assert_eq!(shlex_split("echo hi").unwrap(), ["echo", "hi"]);
        assert_eq!(shlex_split("echo $HOME").unwrap(), ["echo", "$HOME"]);
        assert_eq!(
            shlex_split(r#"a "b c" 'd e' f\ g"#).unwrap(),
            ["a", "b c", "d e", "f g"]
        );
        assert_eq!(shlex_split(r#""a\"b\n""#).unwrap(), ["a\"b\\n"]);
        assert_eq!(shlex_split("''").unwrap(), [""]);
        assert_eq!(shlex_split("echo 'x").unwrap_err(), "No closing quotation");
        assert_eq!(shlex_split("echo \\").unwrap_err(), "No escaped character");
        assert_eq!(py_list(&["sleep".into(), "400".into()]), "['sleep', '400']");
        assert_eq!(py_float(300.0), "300.0");
    }

    #[test]
    fn texts_python_prints() {
        assert_eq!(
            decode(vec![0xff]).unwrap_err(),
            "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
        );
        assert_eq!(decode(b"a\r\nb\rc".to_vec()).unwrap(), "a\nb\nc");
        assert_eq!(unquote("a%2Fb%41"), "a/bA");
    }
}
