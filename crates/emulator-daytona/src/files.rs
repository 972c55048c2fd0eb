//! The toolbox's filesystem routes.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use http::StatusCode;

use super::{HOME, SandboxEntry, daemon_error, json_response};
use execseam_emulator_kit::Fs;
use execseam_emulator_kit::clock::{self, Fraction};

const BOUNDARY: &str = "DAYTONA-FILE-BOUNDARY";

/// RFC 3339 in UTC with seconds: `2024-01-01T00:00:00Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    clock::rfc3339(t, Fraction::None)
}

/// Go's `time.String()` in UTC: `2024-01-01 00:00:00.123456789 +0000 UTC`.
fn go_time(t: SystemTime) -> String {
    let u = clock::Utc::of(t);
    format!(
        "{} {}{} +0000 UTC",
        u.date(),
        u.time(),
        u.fraction(Fraction::Trimmed)
    )
}

/// Go's `FileMode.String()`.
fn go_mode(meta: &std::fs::Metadata) -> String {
    let ft = meta.file_type();
    let mode = meta.permissions().mode();
    let mut s = String::new();
    for (set, letters) in [
        (ft.is_dir(), "d"),
        (ft.is_symlink(), "L"),
        (ft.is_block_device(), "D"),
        (ft.is_fifo(), "p"),
        (ft.is_socket(), "S"),
        (ft.is_char_device(), "Dc"),
        (mode & 0o4000 != 0, "u"),
        (mode & 0o2000 != 0, "g"),
        (mode & 0o1000 != 0, "t"),
    ] {
        if set {
            s.push_str(letters);
        }
    }
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

fn file_info(name: &str, meta: &std::fs::Metadata, path: Option<&str>) -> serde_json::Value {
    let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
    let mut v = serde_json::json!({
        "name": name,
        "size": meta.len(),
        "mode": go_mode(meta),
        "modTime": go_time(mtime),
        "modifiedAt": rfc3339(mtime),
        "isDir": meta.is_dir(),
        "owner": meta.uid().to_string(),
        "group": meta.gid().to_string(),
        "permissions": format!("{:04o}", meta.permissions().mode() & 0o777),
    });
    if let Some(p) = path {
        v["path"] = p.into();
    }
    v
}

pub(crate) fn query(req: &Request) -> Vec<(String, String)> {
    execseam_emulator_kit::util::form_pairs(req.uri().query().unwrap_or(""))
}

fn param(q: &[(String, String)], key: &str) -> Option<String> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// `key`'s value unless it is absent or empty.
fn nonempty(q: &[(String, String)], key: &str) -> Option<String> {
    param(q, key).filter(|v| !v.is_empty())
}

/// A sandbox path from a request: relative paths are relative to the daemon's cwd (the home).
fn sandbox_path(p: &str) -> String {
    if p.is_empty() || p == "." {
        HOME.to_owned()
    } else if p.starts_with('/') {
        p.to_owned()
    } else {
        format!("{HOME}/{p}")
    }
}

fn rel(sb: &SandboxEntry, req: &Request) -> String {
    req.uri()
        .path()
        .trim_start_matches(&format!("/toolbox/{}", sb.id))
        .to_owned()
}

/// Runs a files-API step as the daemon does: inside the sandbox, as the sandbox's user (the
/// daemon runs as `daytona`: its permission checks are that user's, new files are its).
async fn as_daemon<F>(sb: &SandboxEntry, route: &str, method: &'static str, f: F) -> Response
where
    F: FnOnce(&Fs) -> Response + Send + 'static,
{
    let user = sb.sandbox.user().clone();
    match sb.sandbox.fs_as(&user, move |fs| Ok(f(fs))).await {
        Ok(r) => r,
        Err(e) => daemon_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the sandbox is unreachable: {e}"),
            None,
            route,
            method,
        ),
    }
}

fn io_error(e: &std::io::Error, what: &str, path: &str, method: &str) -> Response {
    let (status, code) = match e.kind() {
        std::io::ErrorKind::NotFound => (StatusCode::NOT_FOUND, "FILE_NOT_FOUND"),
        std::io::ErrorKind::PermissionDenied => (StatusCode::FORBIDDEN, "FILE_ACCESS_DENIED"),
        _ => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
    };
    daemon_error(status, &format!("{what}: {e}"), Some(code), path, method)
}

pub(super) async fn list(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let p = sandbox_path(&param(&q, "path").unwrap_or_default());
    let depth: u32 = param(&q, "depth")
        .and_then(|d| d.parse().ok())
        .unwrap_or(1)
        .max(1);
    as_daemon(&sb, &route.clone(), "GET", move |fs| {
        let mut out = Vec::new();
        if let Err(e) = list_into(&fs.path(&p), &p, depth, &mut out) {
            return io_error(&e, "file not found", &route, "GET");
        }
        json_response(StatusCode::OK, &serde_json::Value::Array(out))
    })
    .await
}

fn list_into(
    host: &Path,
    shown: &str,
    depth: u32,
    out: &mut Vec<serde_json::Value>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(host)?.filter_map(Result::ok).collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let Ok(meta) = e.metadata() else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        let full = format!("{}/{name}", shown.trim_end_matches('/'));
        out.push(file_info(&name, &meta, Some(&full)));
        if depth > 1 && meta.is_dir() {
            let _ = list_into(&e.path(), &full, depth - 1, out);
        }
    }
    Ok(())
}

pub(super) async fn info(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let Some(p) = nonempty(&q, "path") else {
        return bad_request("path is required", &route, "GET");
    };
    let p = sandbox_path(&p);
    as_daemon(
        &sb,
        &route.clone(),
        "GET",
        move |fs| match std::fs::metadata(fs.path(&p)) {
            Ok(meta) => {
                let name = Path::new(&p)
                    .file_name()
                    .map_or_else(|| "/".to_owned(), |n| n.to_string_lossy().into_owned());
                json_response(StatusCode::OK, &file_info(&name, &meta, Some(&p)))
            }
            Err(e) => io_error(&e, &format!("file not found: {p}"), &route, "GET"),
        },
    )
    .await
}

/// Walks like Go's `filepath.Walk` (lstat, no symlink following, unreadable dirs skipped),
/// calling `f(shown_path, host_path, metadata)` for the root and everything below.
fn walk(host: &Path, shown: &str, f: &mut dyn FnMut(&str, &Path, &std::fs::Metadata)) {
    let Ok(meta) = std::fs::symlink_metadata(host) else {
        return;
    };
    f(shown, host, &meta);
    if !meta.is_dir() {
        return;
    }
    let Ok(rd) = std::fs::read_dir(host) else {
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(Result::ok).collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        walk(
            &e.path(),
            &format!("{}/{name}", shown.trim_end_matches('/')),
            f,
        );
    }
}

/// The route, the sandbox `path` and the `pattern` of a find or search (both required).
fn path_and_pattern(
    sb: &SandboxEntry,
    req: &Request,
) -> Result<(String, String, String), Response> {
    let route = rel(sb, req);
    let q = query(req);
    let (Some(p), Some(pattern)) = (nonempty(&q, "path"), nonempty(&q, "pattern")) else {
        return Err(bad_request("path and pattern are required", &route, "GET"));
    };
    Ok((route, sandbox_path(&p), pattern))
}

pub(super) async fn find(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let (route, p, pattern) = match path_and_pattern(&sb, &req) {
        Ok(found) => found,
        Err(r) => return r,
    };
    as_daemon(&sb, &route, "GET", move |fs| {
        let mut hits = Vec::new();
        walk(&fs.path(&p), &p, &mut |shown, host, meta| {
            if !meta.is_file() {
                return;
            }
            let Ok(data) = std::fs::read(host) else {
                return;
            };
            if data[..data.len().min(512)].contains(&0) {
                return; // binary
            }
            for (i, line) in data.split(|&b| b == b'\n').enumerate() {
                if line.len() > 64 * 1024 {
                    break;
                }
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let text = String::from_utf8_lossy(line);
                if text.contains(pattern.as_str()) {
                    hits.push(serde_json::json!({"file": shown, "line": i + 1, "content": text}));
                }
            }
        });
        json_response(StatusCode::OK, &serde_json::Value::Array(hits))
    })
    .await
}

/// Go's `filepath.Match` on one name (no separators in `name`).
pub(crate) fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, length consumed including ']')
        let mut i = 0;
        let negate = matches!(p.first(), Some(b'^') | Some(b'!'));
        if negate {
            i += 1;
        }
        let mut matched = false;
        let mut first = true;
        while i < p.len() {
            if p[i] == b']' && !first {
                return Some((matched != negate, i + 1));
            }
            first = false;
            let mut lo = p[i];
            if lo == b'\\' {
                i += 1;
                lo = *p.get(i)?;
            }
            i += 1;
            let mut hi = lo;
            if p.get(i) == Some(&b'-') && p.get(i + 1).is_some_and(|&b| b != b']') {
                hi = p[i + 1];
                if hi == b'\\' {
                    hi = *p.get(i + 2)?;
                    i += 1;
                }
                i += 2;
            }
            if lo <= c && c <= hi {
                matched = true;
            }
        }
        None
    }
    let (mut p, mut n) = (0usize, 0usize);
    let (mut star_p, mut star_n) = (None::<usize>, 0usize);
    while n < name.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star_p = Some(p);
                    star_n = n;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, len)) = class(&pattern[p + 1..], name[n]) {
                        if ok {
                            p += 1 + len;
                            n += 1;
                            continue;
                        }
                    } else {
                        return false;
                    }
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == name[n] => {
                    p += 2;
                    n += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() => {}
                c if c == name[n] => {
                    p += 1;
                    n += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star_p {
            Some(sp) => {
                p = sp + 1;
                star_n += 1;
                n = star_n;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

pub(super) async fn search(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let (route, p, pattern) = match path_and_pattern(&sb, &req) {
        Ok(found) => found,
        Err(r) => return r,
    };
    as_daemon(&sb, &route, "GET", move |fs| {
        let mut files = Vec::new();
        walk(&fs.path(&p), &p, &mut |shown, host, _| {
            let base = host
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if glob_match(pattern.as_bytes(), base.as_bytes()) {
                files.push(shown.to_owned());
            }
        });
        json_response(StatusCode::OK, &serde_json::json!({"files": files}))
    })
    .await
}

fn mime(path: &str) -> &'static str {
    match Path::new(path).extension().and_then(|e| e.to_str()) {
        Some("txt" | "log" | "md") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("py") => "text/x-python; charset=utf-8",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

fn rfc5987(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn disposition(name: &str, path: &str) -> String {
    let latin: String = path
        .chars()
        .map(|c| {
            if (c as u32) < 0x80 && !c.is_control() {
                c
            } else {
                '_'
            }
        })
        .collect();
    let quoted = latin.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "form-data; name=\"{name}\"; filename=\"{quoted}\"; filename*=utf-8''{}",
        rfc5987(path)
    )
}

fn read_for_download(fs: &Fs, path: &str) -> Result<Vec<u8>, (u16, &'static str, String)> {
    if path.is_empty() {
        return Err((
            400,
            "INVALID_FILE_PATH",
            "invalid file path: path is empty".into(),
        ));
    }
    let host = fs.path(&sandbox_path(path));
    match std::fs::metadata(&host) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err((404, "FILE_NOT_FOUND", format!("file not found: {path}")));
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err((403, "FILE_ACCESS_DENIED", format!("access denied: {path}")));
        }
        Err(e) => return Err((500, "FILE_READ_FAILED", format!("failed to read file: {e}"))),
        Ok(m) if m.is_dir() => {
            return Err((
                400,
                "INVALID_FILE_PATH",
                format!("invalid file path: path points to a directory: {path}"),
            ));
        }
        Ok(_) => {}
    }
    std::fs::read(&host).map_err(|e| (500, "FILE_READ_FAILED", format!("failed to read file: {e}")))
}

pub(super) async fn download_one(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let p = param(&q, "path").unwrap_or_default();
    as_daemon(
        &sb,
        &route.clone(),
        "GET",
        move |fs| match read_for_download(fs, &p) {
            Ok(data) => (
                StatusCode::OK,
                [(http::header::CONTENT_TYPE, "application/octet-stream")],
                data,
            )
                .into_response(),
            Err((status, code, msg)) => daemon_error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                &msg,
                Some(code),
                &route,
                "GET",
            ),
        },
    )
    .await
}

pub(super) async fn bulk_download(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let body = axum::body::to_bytes(req.into_body(), 1 << 24)
        .await
        .unwrap_or_default();
    #[derive(serde::Deserialize)]
    struct Paths {
        paths: Vec<String>,
    }
    let paths = match serde_json::from_slice::<Paths>(&body) {
        Ok(p) if !p.paths.is_empty() => p.paths,
        _ => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({"error": "request body must be {\"paths\": [ ... ]} and non-empty"}),
            );
        }
    };
    as_daemon(&sb, &route, "POST", move |fs| {
    let mut out = Vec::new();
    for p in &paths {
        out.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match read_for_download(fs, p) {
            Ok(data) => {
                out.extend_from_slice(
                    format!(
                        "Content-Disposition: {}\r\nContent-Length: {}\r\nContent-Type: {}\r\n\r\n",
                        disposition("file", p),
                        data.len(),
                        mime(p)
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(&data);
            }
            Err((status, code, msg)) => {
                let err = serde_json::json!({
                    "statusCode": status, "message": msg, "code": code,
                    "timestamp": rfc3339(SystemTime::now()), "path": p, "method": "POST",
                    "source": "DAYTONA_DAEMON",
                });
                out.extend_from_slice(
                    format!(
                        "Content-Disposition: {}\r\nContent-Type: application/json; charset=utf-8\r\n\r\n{err}",
                        disposition("error", p)
                    )
                    .as_bytes(),
                );
            }
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    (
        StatusCode::OK,
        [(
            http::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )],
        out,
    )
        .into_response()
    })
    .await
}

pub(super) async fn bulk_upload(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let boundary = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok());
    let Some(boundary) = boundary else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({"errors": ["invalid multipart form"], "files": []}),
        );
    };
    let stream = req.into_body().into_data_stream();
    let mut mp = multer::Multipart::new(stream, boundary);
    let mut pending: std::collections::HashMap<String, String> = Default::default();
    let (mut files, mut errors) = (Vec::new(), Vec::new());
    loop {
        let field = match mp.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                errors.push(format!("invalid multipart form: {e}"));
                break;
            }
        };
        let name = field.name().unwrap_or_default().to_owned();
        let Some(rest) = name.strip_prefix("files[") else {
            continue;
        };
        let Some((idx, kind)) = rest.split_once("].") else {
            continue;
        };
        let idx = idx.to_owned();
        match kind {
            "path" => {
                let v = field.text().await.unwrap_or_default();
                pending.insert(idx, v);
            }
            "file" => {
                let Some(dest) = pending.remove(&idx) else {
                    errors.push(format!("file[{idx}]: missing .path metadata"));
                    continue;
                };
                let mut data = Vec::new();
                let mut field = field;
                let mut failed = false;
                while let Some(chunk) = field.next().await {
                    match chunk {
                        Ok(c) => data.extend_from_slice(&c),
                        Err(e) => {
                            errors.push(format!("{dest}: {e}"));
                            failed = true;
                            break;
                        }
                    }
                }
                if failed {
                    continue;
                }
                let (target, n) = (sandbox_path(&dest), data.len());
                let user = sb.sandbox.user().clone();
                let written = sb
                    .sandbox
                    .fs_as(&user, move |fs| {
                        let host = fs.path(&target);
                        if let Some(parent) = host.parent() {
                            std::fs::create_dir_all(parent)?;
                        }
                        std::fs::write(&host, &data)
                    })
                    .await;
                match written {
                    Ok(()) => files.push(serde_json::json!({"path": dest, "bytes": n})),
                    Err(e) => errors.push(format!("{dest}: {e}")),
                }
            }
            _ => {}
        }
    }
    let _ = route;
    if errors.is_empty() {
        json_response(StatusCode::OK, &serde_json::json!({"files": files}))
    } else {
        json_response(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({"errors": errors, "files": files}),
        )
    }
}

pub(super) async fn folder(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let Some(p) = nonempty(&q, "path") else {
        return bad_request("path is required", &route, "POST");
    };
    let mode = param(&q, "mode").unwrap_or_else(|| "755".into());
    let Ok(mode) = u32::from_str_radix(&mode, 8) else {
        return bad_request("invalid mode format", &route, "POST");
    };
    as_daemon(&sb, &route.clone(), "POST", move |fs| {
        let host = fs.path(&sandbox_path(&p));
        match std::fs::create_dir_all(&host) {
            Ok(()) => {
                let _ = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode));
                StatusCode::CREATED.into_response()
            }
            Err(e) => io_error(&e, "failed to create folder", &route, "POST"),
        }
    })
    .await
}

pub(super) async fn delete(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let Some(p) = nonempty(&q, "path") else {
        return bad_request("path is required", &route, "DELETE");
    };
    let recursive = param(&q, "recursive").as_deref() == Some("true");
    as_daemon(&sb, &route.clone(), "DELETE", move |fs| {
        let host = fs.path(&sandbox_path(&p));
        let r = match std::fs::symlink_metadata(&host) {
            Err(e) => Err(e),
            Ok(m) if m.is_dir() && !recursive => {
                return bad_request(
                    "cannot delete directory without recursive flag",
                    &route,
                    "DELETE",
                );
            }
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&host),
            Ok(_) => std::fs::remove_file(&host),
        };
        match r {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(e) => io_error(&e, "failed to delete", &route, "DELETE"),
        }
    })
    .await
}

fn bad_request(message: &str, route: &str, method: &str) -> Response {
    daemon_error(
        StatusCode::BAD_REQUEST,
        &format!("bad request: {message}"),
        Some("BAD_REQUEST"),
        route,
        method,
    )
}

/// Go's text for an errno (`syscall.Errno.Error()`), for the daemon's error strings.
fn go_errno(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) => "no such file or directory".into(),
        Some(libc::EACCES) => "permission denied".into(),
        Some(libc::EISDIR) => "is a directory".into(),
        Some(libc::ENOTDIR) => "not a directory".into(),
        _ => e.to_string(),
    }
}

/// Copies `src` to `dst` (recursively for a directory, keeping modes): `MoveFile`'s fallback
/// when `os.Rename` fails (another mount).
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    let md = std::fs::symlink_metadata(src)?;
    if md.is_dir() {
        std::fs::create_dir(dst)?;
        std::fs::set_permissions(dst, md.permissions())?;
        for e in std::fs::read_dir(src)? {
            let e = e?;
            copy_tree(&e.path(), &dst.join(e.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(src, dst).map(|_| ())
    }
}

/// `POST /files/move?source=&destination=` (`toolbox/fs/move_file.go`): both required; the
/// source and the destination's directory must exist (404), the destination must not (409);
/// a rename, else a copy and a removal. 200 without a body.
pub(super) async fn move_file(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let (Some(src), Some(dst)) = (nonempty(&q, "source"), nonempty(&q, "destination")) else {
        return bad_request("source and destination paths are required", &route, "POST");
    };
    as_daemon(&sb, &route.clone(), "POST", move |fs| {
        let (src_p, dst_p) = (sandbox_path(&src), sandbox_path(&dst));
        let (hs, hd) = (fs.path(&src_p), fs.path(&dst_p));
        if let Err(e) = std::fs::metadata(&hs) {
            return io_error(&e, &format!("stat {src_p}"), &route, "POST");
        }
        let parent = Path::new(&dst_p)
            .parent()
            .map_or_else(|| "/".to_owned(), |p| p.to_string_lossy().into_owned());
        if let Err(e) = std::fs::metadata(fs.path(&parent)) {
            return io_error(&e, &format!("stat {parent}"), &route, "POST");
        }
        if std::fs::metadata(&hd).is_ok() {
            return daemon_error(
                StatusCode::CONFLICT,
                "conflict: destination already exists",
                Some("CONFLICT"),
                &route,
                "POST",
            );
        }
        if std::fs::rename(&hs, &hd).is_err() {
            if let Err(e) = copy_tree(&hs, &hd) {
                return bad_request(&format!("failed to move file: {e}"), &route, "POST");
            }
            let removed = if hs.is_dir() {
                std::fs::remove_dir_all(&hs)
            } else {
                std::fs::remove_file(&hs)
            };
            if let Err(e) = removed {
                return json_response(
                    StatusCode::OK,
                    &serde_json::json!({
                        "message": "file copied successfully but source could not be deleted",
                        "error": format!("failed to delete source: {e}"),
                    }),
                );
            }
        }
        StatusCode::OK.into_response()
    })
    .await
}

#[derive(serde::Deserialize)]
struct ReplaceRequest {
    files: Vec<String>,
    pattern: String,
    #[serde(rename = "newValue")]
    new_value: Option<String>,
}

/// `POST /files/replace` `{files, pattern, newValue}` (`toolbox/fs/replace_in_files.go`): every
/// occurrence of the literal pattern, file by file; one `{file, success, error?}` per file,
/// errors as Go words them; 200.
pub(super) async fn replace(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return bad_request(&format!("invalid request body: {e}"), &route, "POST"),
    };
    let r: ReplaceRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(&format!("invalid request body: {e}"), &route, "POST"),
    };
    as_daemon(&sb, &route.clone(), "POST", move |fs| {
        let new_value = r.new_value.unwrap_or_default();
        let results: Vec<serde_json::Value> = r
            .files
            .iter()
            .map(|f| {
                let host = fs.path(&sandbox_path(f));
                let content = match std::fs::read(&host) {
                    Ok(c) => c,
                    Err(e) => {
                        let op = if host.is_dir() { "read" } else { "open" };
                        return serde_json::json!({"file": f, "success": false, "error": format!("{op} {f}: {}", go_errno(&e))});
                    }
                };
                let text = String::from_utf8_lossy(&content).replace(&r.pattern, &new_value);
                match std::fs::write(&host, text) {
                    Ok(()) => serde_json::json!({"file": f, "success": true}),
                    Err(e) => serde_json::json!({"file": f, "success": false, "error": format!("open {f}: {}", go_errno(&e))}),
                }
            })
            .collect();
        json_response(StatusCode::OK, &serde_json::Value::Array(results))
    })
    .await
}

/// `POST /files/permissions?path=&mode=&owner=&group=` (`toolbox/fs/set_file_permissions.go`):
/// `mode` octal, `owner`/`group` names or numeric ids, each optional; 200 without a body.
pub(super) async fn permissions(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let route = rel(&sb, &req);
    let q = query(&req);
    let Some(p) = nonempty(&q, "path") else {
        return bad_request("path is required", &route, "POST");
    };
    let mode = nonempty(&q, "mode");
    let owner = nonempty(&q, "owner");
    let group = nonempty(&q, "group");
    let users = {
        let mut u = vec![sb.sandbox.user().clone()];
        u.push(execseam_emulator_kit::User::root());
        u
    };
    as_daemon(&sb, &route.clone(), "POST", move |fs| {
        let sp = sandbox_path(&p);
        let host = fs.path(&sp);
        if let Err(e) = std::fs::metadata(&host) {
            return io_error(&e, &format!("stat {sp}"), &route, "POST");
        }
        if let Some(m) = mode {
            let Ok(bits) = u32::from_str_radix(&m, 8) else {
                return bad_request("invalid mode format", &route, "POST");
            };
            if let Err(e) = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(bits)) {
                return bad_request(
                    &format!("failed to change mode: chmod {sp}: {}", go_errno(&e)),
                    &route,
                    "POST",
                );
            }
        }
        if owner.is_some() || group.is_some() {
            let lookup = |name: &str| -> Option<u32> {
                name.parse::<u32>()
                    .ok()
                    .or_else(|| users.iter().find(|u| u.name == name).map(|u| u.uid))
            };
            let uid = match &owner {
                None => None,
                Some(o) => match lookup(o) {
                    Some(u) => Some(u),
                    None => return bad_request("user not found", &route, "POST"),
                },
            };
            let gid = match &group {
                None => None,
                Some(g) => match lookup(g) {
                    Some(u) => Some(u),
                    None => return bad_request("group not found", &route, "POST"),
                },
            };
            if let Err(e) = std::os::unix::fs::chown(&host, uid, gid) {
                return bad_request(
                    &format!("failed to change ownership: chown {sp}: {}", go_errno(&e)),
                    &route,
                    "POST",
                );
            }
        }
        StatusCode::OK.into_response()
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_go() {
        for (p, n, want) in [
            ("*.txt", "a.txt", true),
            ("*.txt", ".hidden.txt", true),
            ("*.txt", "a.txt.bak", false),
            ("a?c", "abc", true),
            ("[a-c]x", "bx", true),
            ("[^a-c]x", "bx", false),
            ("[!a-c]x", "dx", true),
            ("\\*", "*", true),
            ("*", "anything", true),
        ] {
            assert_eq!(glob_match(p.as_bytes(), n.as_bytes()), want, "{p} {n}");
        }
    }

    #[test]
    fn times_render_as_go_and_rfc3339() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_704_067_200);
        assert_eq!(rfc3339(t), "2024-01-01T00:00:00Z");
        assert_eq!(go_time(t), "2024-01-01 00:00:00 +0000 UTC");
    }

    #[test]
    fn dispositions_echo_the_path() {
        assert_eq!(
            disposition("file", "/tmp/a.txt"),
            "form-data; name=\"file\"; filename=\"/tmp/a.txt\"; filename*=utf-8''%2Ftmp%2Fa.txt"
        );
    }
}
