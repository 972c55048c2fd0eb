//! `filesystem.Filesystem` (Stat, MakeDir, Move, ListDir, Remove) and envd's `/files` routes,
//! with envd's semantics (`services/filesystem/*.go`, `api/{download,upload}.go`). Paths are the
//! sandbox's (`/home/user/x`); symlinks are resolved in the sandbox's view.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use axum::body::Body;
use axum::extract::Query;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::connect::{self as rpc, RpcError};
use super::{EnvdRequest, Sbx, plain_error, resolve, user_named, user_of};
use execseam_emulator_kit::Fs;
use execseam_emulator_kit::util::clean_path;

fn owner(uid: u32) -> String {
    super::account_name(uid)
}

fn group(gid: u32) -> String {
    super::account_name(gid)
}

/// Go's `FileMode.String()` for a Unix mode.
pub(crate) fn mode_string(md: &std::fs::Metadata) -> String {
    let ft = md.file_type();
    let m = md.mode();
    let mut s = String::new();
    if ft.is_dir() {
        s.push('d');
    }
    if ft.is_symlink() {
        s.push('L');
    }
    if ft.is_block_device() || ft.is_char_device() {
        s.push('D');
    }
    if ft.is_fifo() {
        s.push('p');
    }
    if ft.is_socket() {
        s.push('S');
    }
    if m & 0o4000 != 0 {
        s.push('u');
    }
    if m & 0o2000 != 0 {
        s.push('g');
    }
    if ft.is_char_device() {
        s.push('c');
    }
    if m & 0o1000 != 0 {
        s.push('t');
    }
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if m & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

fn file_type_name(ft: std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "FILE_TYPE_SYMLINK"
    } else if ft.is_dir() {
        "FILE_TYPE_DIRECTORY"
    } else if ft.is_file() {
        "FILE_TYPE_FILE"
    } else {
        "FILE_TYPE_UNSPECIFIED"
    }
}

/// An `EntryInfo` in proto3 JSON (defaults omitted, `size` as a string).
fn entry_json(
    path: &str,
    md: &std::fs::Metadata,
    file_type: &str,
    symlink_target: Option<&str>,
    perm_md: &std::fs::Metadata,
) -> Value {
    let mut e = serde_json::Map::new();
    let name = path.rsplit('/').next().unwrap_or_default();
    if !name.is_empty() {
        e.insert("name".into(), json!(name));
    }
    if file_type != "FILE_TYPE_UNSPECIFIED" {
        e.insert("type".into(), json!(file_type));
    }
    e.insert("path".into(), json!(path));
    if md.len() != 0 {
        e.insert("size".into(), json!(md.len().to_string()));
    }
    let mode = perm_md.permissions().mode() & 0o777;
    if mode != 0 {
        e.insert("mode".into(), json!(mode));
    }
    e.insert("permissions".into(), json!(mode_string(md)));
    e.insert("owner".into(), json!(owner(md.uid())));
    e.insert("group".into(), json!(group(md.gid())));
    if let Ok(t) = md.modified() {
        e.insert("modifiedTime".into(), json!(super::time::rfc3339(t)));
    }
    if let Some(t) = symlink_target {
        e.insert("symlinkTarget".into(), json!(t));
    }
    Value::Object(e)
}

/// `filepath.EvalSymlinks` in the sandbox's view: absolute link targets are sandbox paths.
fn eval_symlinks(fs: &Fs, path: &str) -> io::Result<String> {
    let mut todo: VecDeque<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    let mut done: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop_front() {
        match c.as_str() {
            "." => continue,
            ".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        let candidate = format!(
            "/{}",
            done.iter()
                .chain([&c])
                .cloned()
                .collect::<Vec<_>>()
                .join("/")
        );
        let host = fs.path(&candidate);
        let md = std::fs::symlink_metadata(&host)?;
        if md.file_type().is_symlink() {
            links += 1;
            if links > 255 {
                return Err(io::Error::other("too many links"));
            }
            let target = std::fs::read_link(&host)?;
            let target = target.to_string_lossy();
            if target.starts_with('/') {
                done.clear();
            }
            for part in target.split('/').filter(|p| !p.is_empty()).rev() {
                todo.push_front(part.to_owned());
            }
        } else {
            done.push(c);
        }
    }
    Ok(format!("/{}", done.join("/")))
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new("internal", e.to_string())
}

/// envd's `not_found` for a missing `path` (`<what> not found: lstat <path>: …`); any other
/// error is `otherwise`'s.
fn lstat_error(
    e: io::Error,
    what: &str,
    path: &str,
    otherwise: impl FnOnce(io::Error) -> RpcError,
) -> RpcError {
    if e.kind() == io::ErrorKind::NotFound {
        RpcError::new(
            "not_found",
            format!("{what} not found: lstat {path}: no such file or directory"),
        )
    } else {
        otherwise(e)
    }
}

/// envd's `entryInfo` (Stat): lstat, and for a symlink the target's type and permission bits.
pub(crate) fn stat_entry(fs: &Fs, path: &str) -> Result<Value, RpcError> {
    let host = fs.path(path);
    let md = std::fs::symlink_metadata(&host).map_err(|e| {
        lstat_error(e, "file", path, |e| {
            internal(format!("error getting file info: {e}"))
        })
    })?;
    if md.file_type().is_symlink() {
        let target = eval_symlinks(fs, path).ok();
        let target_md = target
            .as_deref()
            .and_then(|t| std::fs::metadata(fs.path(t)).ok());
        let ft = match &target_md {
            Some(t) if t.is_dir() => "FILE_TYPE_DIRECTORY",
            Some(t) if t.is_file() => "FILE_TYPE_FILE",
            _ => "FILE_TYPE_UNSPECIFIED",
        };
        let perm = target_md.as_ref().unwrap_or(&md);
        let mut e = entry_json(path, &md, ft, target.as_deref(), perm);
        with_metadata(&mut e, &host);
        return Ok(e);
    }
    let mut e = entry_json(path, &md, file_type_name(md.file_type()), None, &md);
    with_metadata(&mut e, &host);
    Ok(e)
}

/// The xattr namespace of a file's user metadata (`shared/pkg/filesystem/xattr.go`
/// `MetadataXattrPrefix`).
const METADATA_XATTR_PREFIX: &str = "user.e2b.";
/// `MaxMetadataTotalLen`: names (with the prefix) plus values, per file.
const METADATA_MAX_TOTAL: usize = 4096;

/// `filesystem.ReadMetadata`: the `user.e2b.*` xattrs, the prefix stripped; entries that are
/// not UTF-8 are skipped; none (or a filesystem without xattrs) is an empty map.
pub(crate) fn read_metadata(host: &Path) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for name in execseam_emulator_kit::sys::list_xattrs(host).unwrap_or_default() {
        let Some(key) = name.strip_prefix(METADATA_XATTR_PREFIX.as_bytes()) else {
            continue;
        };
        let (Ok(key), Ok(value)) = (
            std::str::from_utf8(key),
            execseam_emulator_kit::sys::get_xattr(host, &name).map(String::from_utf8),
        ) else {
            continue;
        };
        if let Ok(value) = value {
            out.insert(key.to_owned(), Value::String(value));
        }
    }
    out
}

/// `EntryInfo.metadata` (field 11), omitted when empty as protojson omits an empty map.
fn with_metadata(entry: &mut Value, host: &Path) {
    let md = read_metadata(host);
    if !md.is_empty()
        && let Some(e) = entry.as_object_mut()
    {
        e.insert("metadata".into(), Value::Object(md));
    }
}

/// `filesystem.WriteMetadata`: the file's `user.e2b.*` set becomes exactly `metadata` (an upload
/// without metadata clears what an earlier upload set). A filesystem without xattrs keeps the
/// file and no metadata, as envd does.
fn write_metadata(host: &Path, metadata: &[(String, String)]) -> io::Result<()> {
    use execseam_emulator_kit::sys;
    let existing = match sys::list_xattrs(host) {
        Ok(v) => v,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in existing {
        if let Some(key) = name.strip_prefix(METADATA_XATTR_PREFIX.as_bytes())
            && !metadata.iter().any(|(k, _)| k.as_bytes() == key)
        {
            match sys::remove_xattr(host, &name) {
                Err(e) if e.raw_os_error() != Some(libc::ENODATA) => return Err(e),
                _ => {}
            }
        }
    }
    for (k, v) in metadata {
        sys::set_xattr(host, &format!("{METADATA_XATTR_PREFIX}{k}"), v.as_bytes())?;
    }
    Ok(())
}

/// `extractMetadataHeaders` and `ValidateMetadata` (`api/upload.go`, `xattr.go`): every
/// `X-Metadata-<key>` header, the key lowercased (Go canonicalises header names, envd then
/// lowercases); keys and values printable US-ASCII, keys at most 246 bytes, 4 KiB in all.
fn metadata_headers(headers: &HeaderMap) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut total = 0;
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix("x-metadata-") else {
            continue;
        };
        if key.is_empty() || out.iter().any(|(k, _)| k == key) {
            continue;
        }
        let value = value.as_bytes();
        if key.len() > 255 - METADATA_XATTR_PREFIX.len() {
            return Err(format!(
                "metadata key {key:?} exceeds {} bytes",
                255 - METADATA_XATTR_PREFIX.len()
            ));
        }
        if let Some((i, c)) = value
            .iter()
            .enumerate()
            .find(|(_, c)| !(0x20..=0x7e).contains(*c))
        {
            return Err(format!(
                "metadata value for key {key:?} contains non-printable-ASCII byte 0x{c:02x} at offset {i}"
            ));
        }
        total += METADATA_XATTR_PREFIX.len() + key.len() + value.len();
        out.push((key.to_owned(), String::from_utf8_lossy(value).into_owned()));
    }
    if total > METADATA_MAX_TOTAL {
        return Err(format!(
            "total metadata size {total} exceeds {METADATA_MAX_TOTAL} bytes"
        ));
    }
    Ok(out)
}

/// `filepath.WalkDir` from `dir`, lexically, without following symlinks, to `depth` levels; the
/// paths are under `requested`.
fn walk(
    fs: &Fs,
    requested: &str,
    dir: &str,
    depth: u32,
    level: u32,
    out: &mut Vec<Value>,
) -> io::Result<()> {
    let host = fs.path(dir);
    let mut entries: Vec<_> = std::fs::read_dir(&host)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        // envd's protojson marshalling rejects strings that are not UTF-8: the whole call fails.
        let Some(name) = e.file_name().to_str().map(str::to_owned) else {
            return Err(io::Error::other(
                "proto: field filesystem.EntryInfo.name contains invalid UTF-8",
            ));
        };
        let md = std::fs::symlink_metadata(e.path())?;
        let path = format!("{}/{name}", requested.trim_end_matches('/'));
        let mut entry = entry_json(&path, &md, file_type_name(md.file_type()), None, &md);
        with_metadata(&mut entry, &e.path());
        out.push(entry);
        if md.is_dir() && level < depth {
            let sub = format!("{}/{name}", dir.trim_end_matches('/'));
            walk(fs, &path, &sub, depth, level + 1, out)?;
        }
    }
    Ok(())
}

/// The request's `path` as given (empty when absent).
fn path_field(v: &Value) -> &str {
    rpc::field(v, "path", "path")
        .and_then(|p| p.as_str())
        .unwrap_or("")
}

fn list_dir(fs: &Fs, v: &Value, user: &super::User) -> Result<Value, RpcError> {
    let path = path_field(v);
    let depth = rpc::int_field(v, "depth", "depth")?.unwrap_or(0);
    let depth = if depth <= 0 { 1 } else { depth as u32 };
    let requested = resolve(path, user);
    let resolved = eval_symlinks(fs, &requested).map_err(|e| {
        lstat_error(e, "path", &requested, |e| {
            if e.to_string().contains("too many links") {
                RpcError::new(
                    "failed_precondition",
                    format!("cyclic symlink or chain >255 links at {requested:?}"),
                )
            } else {
                internal(format!("error resolving symlink: {e}"))
            }
        })
    })?;
    let md = std::fs::metadata(fs.path(&resolved))
        .map_err(|e| internal(format!("error getting file info: {e}")))?;
    if !md.is_dir() {
        return Err(RpcError::new(
            "invalid_argument",
            format!("path is not a directory: {resolved}"),
        ));
    }
    let mut entries = Vec::new();
    walk(fs, &requested, &resolved, depth, 1, &mut entries)
        .map_err(|e| internal(format!("error reading directory {resolved}: {e}")))?;
    Ok(if entries.is_empty() {
        json!({})
    } else {
        json!({"entries": entries})
    })
}

fn make_dir(fs: &Fs, v: &Value, user: &super::User) -> Result<Value, RpcError> {
    let path = resolve(path_field(v), user);
    let host = fs.path(&path);
    match std::fs::metadata(&host) {
        Ok(md) if md.is_dir() => {
            return Err(RpcError::new(
                "already_exists",
                format!("directory already exists: {path}"),
            ));
        }
        Ok(_) => {
            return Err(RpcError::new(
                "invalid_argument",
                format!("path already exists but it is not a directory: {path}"),
            ));
        }
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(internal(format!("error getting file info: {e}")));
        }
        Err(_) => {}
    }
    super::ensure_dirs(fs, &host, user.uid).map_err(internal)?;
    let name = path.rsplit('/').next().unwrap_or_default();
    Ok(json!({"entry": {"name": name, "type": "FILE_TYPE_DIRECTORY", "path": path}}))
}

fn move_entry(fs: &Fs, v: &Value, user: &super::User) -> Result<Value, RpcError> {
    let get = |k: &str| rpc::field(v, k, k).and_then(|p| p.as_str()).unwrap_or("");
    let source = resolve(get("source"), user);
    let destination = resolve(get("destination"), user);
    let src_host = fs.path(&source);
    if std::fs::symlink_metadata(&src_host).is_err() {
        return Err(RpcError::new(
            "not_found",
            format!("source file not found: {source}"),
        ));
    }
    let dst_host = fs.path(&destination);
    if let Some(parent) = dst_host.parent() {
        super::ensure_dirs(fs, parent, user.uid).map_err(internal)?;
    }
    std::fs::rename(&src_host, &dst_host).map_err(|e| internal(format!("error renaming: {e}")))?;
    Ok(json!({"entry": stat_entry(fs, &destination)?}))
}

fn remove(fs: &Fs, v: &Value, user: &super::User) -> Result<Value, RpcError> {
    let path = resolve(path_field(v), user);
    let host = fs.path(&path);
    let r = match std::fs::symlink_metadata(&host) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(&host),
        Ok(_) => std::fs::remove_file(&host),
        Err(_) => Ok(()), // os.RemoveAll: a missing path is fine
    };
    r.map_err(|e| internal(format!("error removing file or directory: {e}")))?;
    Ok(json!({}))
}

/// Routes `/filesystem.Filesystem/<method>`.
pub(crate) async fn dispatch(req: EnvdRequest, method: String) -> Response {
    if !matches!(
        method.as_str(),
        "Stat" | "MakeDir" | "Move" | "ListDir" | "Remove"
    ) {
        if matches!(
            method.as_str(),
            "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher"
        ) {
            return watcher_call(req, &method).await;
        }
        if method == "WatchDir" {
            return super::watch::watch_dir(req).await;
        }
        return plain_error(StatusCode::NOT_FOUND, "404 page not found");
    }
    if rpc::content_type(&req.headers) != "application/json" {
        return rpc::unsupported_media_type("application/json");
    }
    let user = match user_of(&req.headers) {
        Ok(u) => u,
        Err(m) => return RpcError::new("unauthenticated", m).unary_response(),
    };
    let body = match rpc::unary_body(req.body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let sbx = req.sbx;
    let r = sbx
        .sandbox
        .fs(move |fs| {
            Ok(rpc::parse(&body).and_then(|v| match method.as_str() {
                "Stat" => {
                    let path = resolve(
                        rpc::field(&v, "path", "path")
                            .and_then(|p| p.as_str())
                            .unwrap_or(""),
                        &user,
                    );
                    stat_entry(fs, &path).map(|e| json!({"entry": e}))
                }
                "MakeDir" => make_dir(fs, &v, &user),
                "Move" => move_entry(fs, &v, &user),
                "ListDir" => list_dir(fs, &v, &user),
                "Remove" => remove(fs, &v, &user),
                _ => unreachable!("checked above"),
            }))
        })
        .await
        .unwrap_or_else(|e| Err(internal(e)));
    rpc::unary_json(r)
}

/// The polling watcher calls (`watch.rs`), unary with the JSON codec.
async fn watcher_call(req: EnvdRequest, method: &str) -> Response {
    let body = match rpc::json_unary_body(&req.headers, req.body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v = match rpc::parse(&body) {
        Ok(v) => v,
        Err(e) => return e.unary_response(),
    };
    let r = match method {
        "CreateWatcher" => super::watch::create(&req.sbx, &v, &req.headers).await,
        "GetWatcherEvents" => super::watch::events(&req.sbx, &v),
        _ => super::watch::remove(&req.sbx, &v),
    };
    rpc::unary_json(r)
}

/// `generateSignature` (`envd/internal/api/auth.go`): `v1_` and the unpadded base64 of the
/// SHA-256 of `path:operation:username:token[:expiration]` (the SDK's `get_signature` in
/// `e2b/sandbox/signature.py` computes the same).
pub(crate) fn signature(
    path: &str,
    operation: &str,
    username: &str,
    token: &str,
    expiration: Option<&str>,
) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let raw = match expiration {
        None => format!("{path}:{operation}:{username}:{token}"),
        Some(exp) => format!("{path}:{operation}:{username}:{token}:{exp}"),
    };
    let digest = sha2::Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest.as_slice())
    )
}

/// `validateSigning` (`api/auth.go`): an `X-Access-Token` header must be the sandbox's token;
/// without one, `signature` must be the signature of the request's raw `path` and `username`
/// query parameters for this operation, and an expiration (Unix seconds) must not have passed.
fn validate_signing(
    req: &EnvdRequest,
    q: &HashMap<String, String>,
    operation: &str,
) -> Result<(), String> {
    let header = req
        .headers
        .get("x-access-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !header.is_empty() {
        return if header == req.sbx.token {
            Ok(())
        } else {
            Err("access token present in header but does not match".into())
        };
    }
    let Some(sig) = q.get("signature") else {
        return Err("missing signature query parameter".into());
    };
    signature_ok(q, operation, &req.sbx.token, sig)
}

fn signature_ok(
    q: &HashMap<String, String>,
    operation: &str,
    token: &str,
    sig: &str,
) -> Result<(), String> {
    let exp = q.get("signature_expiration");
    let want = signature(
        q.get("path").map(String::as_str).unwrap_or(""),
        operation,
        q.get("username").map(String::as_str).unwrap_or(""),
        token,
        exp.map(String::as_str),
    );
    if want != sig {
        return Err("invalid signature".into());
    }
    if let Some(exp) = exp {
        let exp: i64 = exp.parse().map_err(|_| "invalid signature".to_owned())?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if exp < now {
            return Err("signature is already expired".into());
        }
    }
    Ok(())
}

/// The sandbox a signed `/files` request that names none is for: the one (exactly one) whose
/// access token verifies its signature.
pub(crate) fn signed_sandbox(state: &super::State, method: &Method, uri: &Uri) -> Option<String> {
    let q = Query::<HashMap<String, String>>::try_from_uri(uri).ok()?.0;
    let sig = q.get("signature")?;
    let operation = match *method {
        Method::GET => "read",
        Method::POST => "write",
        _ => return None,
    };
    let sandboxes = state.shell.sandboxes().lock();
    let mut matching = sandboxes.values().filter(|s| {
        signature(
            q.get("path").map(String::as_str).unwrap_or(""),
            operation,
            q.get("username").map(String::as_str).unwrap_or(""),
            &s.token,
            q.get("signature_expiration").map(String::as_str),
        ) == *sig
    });
    let first = matching.next()?;
    matching.next().is_none().then(|| first.id.clone())
}

/// `parseEncoding`: the coding without its parameters, lowercased.
fn parse_encoding(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// `parseAcceptEncoding` (`api/encoding.go`): the best coding envd supports by quality, gzip
/// being the only one; identity unless the header rejects it, which with no gzip is a 406.
fn accepts_gzip(headers: &HeaderMap) -> Result<bool, String> {
    let header = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if header.trim().is_empty() {
        return Ok(false);
    }
    let mut gzip_q: Option<f64> = None;
    let mut identity_q: Option<f64> = None;
    let mut wildcard_q: Option<f64> = None;
    for item in header.split(',') {
        let name = parse_encoding(item);
        let q = item
            .split(';')
            .skip(1)
            .filter_map(|p| {
                let p = p.trim();
                (p.len() > 2 && p[..2].eq_ignore_ascii_case("q="))
                    .then(|| p[2..].parse::<f64>().ok())
                    .flatten()
            })
            .next()
            .unwrap_or(1.0);
        match name.as_str() {
            "gzip" => gzip_q = Some(q),
            "identity" => identity_q = Some(q),
            "*" => wildcard_q = Some(q),
            _ => {}
        }
    }
    let gzip = gzip_q.or(wildcard_q).unwrap_or(0.0);
    let identity_rejected =
        identity_q == Some(0.0) || (identity_q.is_none() && wildcard_q == Some(0.0));
    if gzip > 0.0 && identity_q.is_none_or(|iq| gzip >= iq) {
        return Ok(true);
    }
    if identity_rejected {
        return Err("error parsing Accept-Encoding: no acceptable encoding found".into());
    }
    Ok(false)
}

fn query(req: &EnvdRequest) -> HashMap<String, String> {
    Query::<HashMap<String, String>>::try_from_uri(&req.uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// The user a `/files` request acts as (`username`, else the default), once its signature for
/// `operation` holds.
fn signed_user(
    req: &EnvdRequest,
    q: &HashMap<String, String>,
    operation: &str,
) -> Result<super::User, String> {
    validate_signing(req, q, operation)?;
    user_named(
        q.get("username")
            .map(String::as_str)
            .filter(|s| !s.is_empty()),
    )
}

/// `GET /files?path=&username=`: the raw bytes.
pub(crate) async fn download(req: EnvdRequest) -> Response {
    let q = query(&req);
    let user = match signed_user(&req, &q, "read") {
        Ok(u) => u,
        Err(m) => return plain_error(StatusCode::UNAUTHORIZED, m),
    };
    let path = resolve(q.get("path").map(String::as_str).unwrap_or(""), &user);
    let p = path.clone();
    let read = req.sbx.sandbox.fs(move |fs| {
        let host = fs.path(&p);
        Ok(match std::fs::metadata(&host) {
            Err(e) => Err(e),
            Ok(md) if md.is_dir() => Ok(None),
            Ok(_) => std::fs::read(&host).map(Some),
        })
    });
    let read = match read.await {
        Ok(r) => r,
        Err(e) => return plain_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match read {
        Err(e) if e.kind() == io::ErrorKind::NotFound => plain_error(
            StatusCode::NOT_FOUND,
            format!("path '{path}' does not exist"),
        ),
        Err(e) => plain_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Ok(None) => plain_error(
            StatusCode::BAD_REQUEST,
            format!("path '{path}' is a directory"),
        ),
        Ok(Some(bytes)) => {
            let name = path.rsplit('/').next().unwrap_or_default().to_owned();
            let ct = if name.ends_with(".txt") {
                "text/plain; charset=utf-8"
            } else {
                "application/octet-stream"
            };
            let gzip = match accepts_gzip(&req.headers) {
                Ok(g) => g,
                Err(m) => return plain_error(StatusCode::NOT_ACCEPTABLE, m),
            };
            let mut resp = (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, ct.to_owned()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("inline; filename=\"{name}\""),
                    ),
                    (header::VARY, "Accept-Encoding".to_owned()),
                ],
            )
                .into_response();
            if gzip {
                use std::io::Write as _;
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                if enc.write_all(&bytes).is_err() {
                    return plain_error(StatusCode::INTERNAL_SERVER_ERROR, "gzip failed");
                }
                let Ok(zipped) = enc.finish() else {
                    return plain_error(StatusCode::INTERNAL_SERVER_ERROR, "gzip failed");
                };
                resp.headers_mut().insert(
                    header::CONTENT_ENCODING,
                    header::HeaderValue::from_static("gzip"),
                );
                *resp.body_mut() = Body::from(zipped);
            } else {
                *resp.body_mut() = Body::from(bytes);
            }
            resp
        }
    }
}

/// [`write_one`] inside the sandbox.
async fn write_in(
    sbx: &Sbx,
    path: String,
    data: Bytes,
    uid: u32,
    metadata: Vec<(String, String)>,
) -> Result<Value, Response> {
    sbx.sandbox
        .fs(move |fs| Ok(write_one(fs, &path, &data, uid, &metadata)))
        .await
        .unwrap_or_else(|e| {
            Err(plain_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            ))
        })
}

fn write_one(
    fs: &Fs,
    path: &str,
    data: &[u8],
    uid: u32,
    metadata: &[(String, String)],
) -> Result<Value, Response> {
    let host = fs.path(path);
    if host.is_dir() {
        return Err(plain_error(
            StatusCode::BAD_REQUEST,
            format!("path is a directory: {path}"),
        ));
    }
    if let Some(parent) = host.parent() {
        super::ensure_dirs(fs, parent, uid)
            .map_err(|e| plain_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    }
    std::fs::write(&host, data).map_err(|e| {
        if e.raw_os_error() == Some(28) {
            plain_error(
                StatusCode::INSUFFICIENT_STORAGE,
                "not enough disk space available",
            )
        } else {
            plain_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    })?;
    super::chown(fs, &host, uid);
    // `processFile`: the metadata is (re)written on every upload, then read back from disk for
    // the answer's `metadata` (absent when there is none).
    write_metadata(&host, metadata).map_err(|e| {
        plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error writing file metadata: {e}"),
        )
    })?;
    let name = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut entry = json!({"name": name, "type": "file", "path": path});
    let persisted = read_metadata(&host);
    if !persisted.is_empty() {
        entry["metadata"] = Value::Object(persisted);
    }
    Ok(entry)
}

/// `POST /files?path=&username=`: multipart (parts named `file`; the part's filename is the
/// destination when `path` is absent) or `application/octet-stream`.
pub(crate) async fn upload(req: EnvdRequest) -> Response {
    let q = query(&req);
    let user = match signed_user(&req, &q, "write") {
        Ok(u) => u,
        Err(m) => return plain_error(StatusCode::UNAUTHORIZED, m),
    };
    let path_param = q
        .get("path")
        .filter(|p| !p.is_empty())
        .map(|p| resolve(p, &user));
    let ct_full = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let ct = rpc::content_type(&req.headers);
    let body = match axum::body::to_bytes(req.body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return plain_error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    // `getDecompressedBody` (`api/encoding.go`): gzip or identity; anything else is a 400.
    let encoding = req
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let body = match parse_encoding(encoding).as_str() {
        "" | "identity" => body,
        "gzip" => {
            use std::io::Read as _;
            let mut out = Vec::new();
            match flate2::read::MultiGzDecoder::new(&body[..]).read_to_end(&mut out) {
                Ok(_) => Bytes::from(out),
                Err(e) => {
                    return plain_error(
                        StatusCode::BAD_REQUEST,
                        format!("error decompressing request body: {e}"),
                    );
                }
            }
        }
        _ => {
            return plain_error(
                StatusCode::BAD_REQUEST,
                format!(
                    "error decompressing request body: unsupported Content-Encoding: {encoding}, supported: [gzip]"
                ),
            );
        }
    };
    let metadata = match metadata_headers(&req.headers) {
        Ok(m) => m,
        Err(m) => {
            return plain_error(StatusCode::BAD_REQUEST, format!("invalid metadata: {m}"));
        }
    };
    let mut written = Vec::new();
    match ct.as_str() {
        "application/octet-stream" => {
            let Some(path) = path_param else {
                return plain_error(
                    StatusCode::BAD_REQUEST,
                    "path is required for octet-stream uploads",
                );
            };
            match write_in(&req.sbx, path, body, user.uid, metadata.clone()).await {
                Ok(v) => written.push(v),
                Err(r) => return r,
            }
        }
        "multipart/form-data" => {
            let Ok(boundary) = multer::parse_boundary(&ct_full) else {
                return plain_error(StatusCode::BAD_REQUEST, "missing multipart boundary");
            };
            let stream = futures_util::stream::once(async move { Ok::<Bytes, io::Error>(body) });
            let mut mp = multer::Multipart::new(stream, boundary);
            let mut seen = std::collections::HashSet::new();
            loop {
                let field = match mp.next_field().await {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => return plain_error(StatusCode::BAD_REQUEST, e.to_string()),
                };
                if field.name() != Some("file") {
                    continue;
                }
                let path = match (&path_param, field.file_name()) {
                    (Some(p), _) => p.clone(),
                    (None, Some(f)) => resolve(f, &user),
                    (None, None) => {
                        return plain_error(StatusCode::BAD_REQUEST, "a file part without a path");
                    }
                };
                if !seen.insert(path.clone()) {
                    return plain_error(
                        StatusCode::BAD_REQUEST,
                        format!("cannot upload multiple files to the same path '{path}'"),
                    );
                }
                let data = match field.bytes().await {
                    Ok(d) => d,
                    Err(e) => return plain_error(StatusCode::BAD_REQUEST, e.to_string()),
                };
                match write_in(
                    &req.sbx,
                    clean_path(&path),
                    data,
                    user.uid,
                    metadata.clone(),
                )
                .await
                {
                    Ok(v) => written.push(v),
                    Err(r) => return r,
                }
            }
        }
        other => {
            return plain_error(
                StatusCode::BAD_REQUEST,
                format!("unsupported content type: {other}"),
            );
        }
    }
    // envd writes this without a Content-Type; Go sniffs it as text.
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Value::Array(written).to_string(),
    )
        .into_response()
}
