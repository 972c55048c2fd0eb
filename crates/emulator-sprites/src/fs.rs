//! `/v1/sprites/{name}/fs/*` (read, write, list, delete, rename, copy, chmod, chown): the
//! filesystem API, on the same files the sprite's commands see.
//!
//! Shapes from sprites-go (`filesystem.go`, `filesystem_control.go`), sprites-py 0.7.2
//! (`filesystem.py`) and the published filesystem reference: `workingDir` is required; relative
//! paths resolve against it; `mode` is an octal string; errors are
//! `{"error","code":"ENOENT|EEXIST|ENOTDIR|EISDIR|EACCES|ENOTEMPTY|EINVAL|EIO","path"}` with 404
//! for ENOENT.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Request, State as AxState};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::Sprite;
use super::State;
use super::exec::{json_response, sprite_for};
use super::query::{Params, Query};
use execseam_emulator_kit::Fs;
use execseam_emulator_kit::util::{resolve_path, rfc3339};

type St = AxState<Arc<State>>;

fn fs_error(op: &str, path: &str, e: &std::io::Error) -> Response {
    let (status, code, text) = match e.kind() {
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, "ENOENT", "no such file or directory"),
        ErrorKind::AlreadyExists => (StatusCode::BAD_REQUEST, "EEXIST", "file exists"),
        ErrorKind::NotADirectory => (StatusCode::BAD_REQUEST, "ENOTDIR", "not a directory"),
        ErrorKind::IsADirectory => (StatusCode::BAD_REQUEST, "EISDIR", "is a directory"),
        ErrorKind::DirectoryNotEmpty => {
            (StatusCode::BAD_REQUEST, "ENOTEMPTY", "directory not empty")
        }
        ErrorKind::PermissionDenied => (StatusCode::BAD_REQUEST, "EACCES", "permission denied"),
        ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "EINVAL", "invalid argument"),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "EIO",
            "input/output error",
        ),
    };
    json_response(
        status,
        &json!({"error": format!("{op} {path}: {text}"), "code": code, "path": path}),
    )
}

fn bad_request(message: &str) -> Response {
    json_response(StatusCode::BAD_REQUEST, &json!({"error": message}))
}

fn mode_string(m: &std::fs::Metadata) -> String {
    format!("{:04o}", m.permissions().mode() & 0o7777)
}

fn parse_mode(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8).ok()
}

/// The common parameters: the sprite, the absolute path, and who does the operation.
struct Target {
    sprite: Arc<Sprite>,
    path: String,
    /// `asRoot=true`: as root instead of the sprite's user.
    as_root: bool,
}

impl Target {
    fn user(&self) -> execseam_emulator_kit::User {
        if self.as_root {
            execseam_emulator_kit::User::root()
        } else {
            self.sprite.sandbox.user().clone()
        }
    }

    /// Runs the operation as the sprite's server does: inside the sprite, as its user (root with
    /// `asRoot`), so permissions and new files' owners are the user's. `f` gets the path to use.
    async fn run<F>(self, f: F) -> Response
    where
        F: FnOnce(&Fs, Target, PathBuf) -> Response + Send + 'static,
    {
        let (sandbox, user) = (self.sprite.sandbox.clone(), self.user());
        let done = sandbox
            .fs_as(&user, move |fs| {
                let host = fs.path(&self.path);
                Ok(f(fs, self, host))
            })
            .await;
        done.unwrap_or_else(|e| fs_error("open", "/", &e))
    }

    /// [`run`](Self::run) over two paths of the same sprite (rename, copy).
    async fn run2<F>(self, other: Target, f: F) -> Response
    where
        F: FnOnce(&Fs, Target, PathBuf, Target, PathBuf) -> Response + Send + 'static,
    {
        let (sandbox, user) = (self.sprite.sandbox.clone(), self.user());
        let done = sandbox
            .fs_as(&user, move |fs| {
                let (a, b) = (fs.path(&self.path), fs.path(&other.path));
                Ok(f(fs, self, a, other, b))
            })
            .await;
        done.unwrap_or_else(|e| fs_error("open", "/", &e))
    }
}

fn target(
    st: &State,
    headers: &HeaderMap,
    name: &str,
    path: Option<&str>,
    wd: Option<&str>,
) -> Result<Target, Response> {
    let sprite = sprite_for(st, headers, name)?;
    let Some(wd) = wd.filter(|w| !w.is_empty()) else {
        return Err(bad_request("workingDir is required"));
    };
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Err(bad_request("path is required"));
    };
    let path = resolve_path(wd, path);
    Ok(Target {
        sprite,
        path,
        as_root: false,
    })
}

fn as_root(t: &mut Target, yes: bool) {
    t.as_root = yes;
}

/// The target a query names (`path` against `workingDir`, as root with `asRoot=true`): read,
/// write, list.
fn query_target(st: &State, name: &str, req: &Request, q: &Query) -> Result<Target, Response> {
    let mut t = target(st, req.headers(), name, q.get("path"), q.get("workingDir"))?;
    as_root(&mut t, q.flag("asRoot"));
    Ok(t)
}

fn entry(name: &str, path: &str, m: &std::fs::Metadata) -> Value {
    let ty = if m.file_type().is_symlink() {
        "symlink"
    } else if m.is_dir() {
        "directory"
    } else {
        "file"
    };
    json!({
        "name": name,
        "path": path,
        "type": ty,
        "size": m.len(),
        "mode": mode_string(m),
        "modTime": m.modified().map(rfc3339).unwrap_or_default(),
        "isDir": m.is_dir() && !m.file_type().is_symlink(),
    })
}

pub(crate) async fn read(st: St, Path(name): Path<String>, req: Request) -> Response {
    let q = Query::parse(req.uri().query());
    let t = match query_target(&st, &name, &req, &q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    t.run(|_, t, host| {
        if host.is_dir() {
            return fs_error(
                "read",
                &t.path,
                &std::io::Error::from(ErrorKind::IsADirectory),
            );
        }
        match std::fs::read(&host) {
            Ok(data) => {
                let mut r = (StatusCode::OK, data).into_response();
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                r
            }
            Err(e) => fs_error("open", &t.path, &e),
        }
    })
    .await
}

pub(crate) async fn write(st: St, Path(name): Path<String>, req: Request) -> Response {
    let q = Query::parse(req.uri().query());
    let t = match query_target(&st, &name, &req, &q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let mode = match q.get("mode").filter(|m| !m.is_empty()) {
        None => 0o644,
        Some(m) => match parse_mode(m) {
            Some(m) => m,
            None => return bad_request(&format!("invalid mode {m:?}")),
        },
    };
    let mkdir = q.flag("mkdirParents") || q.flag("mkdir");
    let body: Bytes = match axum::body::to_bytes(req.into_body(), usize::MAX).await {
        Ok(b) => b,
        Err(e) => return bad_request(&format!("cannot read the body: {e}")),
    };
    t.run(move |_, t, host| {
        if mkdir
            && let Some(parent) = host.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return fs_error("mkdir", &t.path, &e);
        }
        if let Err(e) = std::fs::write(&host, &body) {
            return fs_error("open", &t.path, &e);
        }
        if let Err(e) = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode)) {
            return fs_error("chmod", &t.path, &e);
        }
        json_response(
            StatusCode::OK,
            &json!({"path": t.path, "size": body.len(), "mode": format!("{mode:04o}")}),
        )
    })
    .await
}

/// The names in `dir`, sorted (the order the listings and copies answer in).
fn sorted_names(dir: &FsPath) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    names.sort();
    Ok(names)
}

fn walk(dir: &FsPath, shown: &str, recursive: bool, out: &mut Vec<Value>) -> std::io::Result<()> {
    for n in sorted_names(dir)? {
        let name = n.to_string_lossy().into_owned();
        let host = dir.join(&n);
        let path = format!("{}/{name}", shown.trim_end_matches('/'));
        let Ok(m) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        out.push(entry(&name, &path, &m));
        if recursive && m.is_dir() {
            walk(&host, &path, true, out)?;
        }
    }
    Ok(())
}

pub(crate) async fn list(st: St, Path(name): Path<String>, req: Request) -> Response {
    let q = Query::parse(req.uri().query());
    let t = match query_target(&st, &name, &req, &q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let recursive = q.flag("recursive");
    t.run(move |_, t, host| {
        let m = match std::fs::symlink_metadata(&host) {
            Ok(m) => m,
            Err(e) => return fs_error("stat", &t.path, &e),
        };
        let mut entries = Vec::new();
        if m.is_dir() {
            if let Err(e) = walk(&host, &t.path, recursive, &mut entries) {
                return fs_error("readdir", &t.path, &e);
            }
        } else {
            // Listing a file returns that file: SDKs implement stat as list + entries[0].
            let name = t.path.rsplit('/').next().unwrap_or_default().to_owned();
            entries.push(entry(&name, &t.path, &m));
        }
        json_response(
            StatusCode::OK,
            &json!({"path": t.path, "count": entries.len(), "entries": entries}),
        )
    })
    .await
}

pub(crate) async fn delete(st: St, Path(name): Path<String>, req: Request) -> Response {
    let headers = req.headers().clone();
    let p = Params::read(req).await;
    let (path, wd) = (p.get("path"), p.get("workingDir"));
    let recursive = p.flag("recursive");
    let mut t = match target(&st, &headers, &name, path.as_deref(), wd.as_deref()) {
        Ok(t) => t,
        Err(r) => return r,
    };
    as_root(&mut t, p.flag("asRoot"));
    t.run(move |_, t, host| {
        let m = match std::fs::symlink_metadata(&host) {
            Ok(m) => m,
            Err(e) => return fs_error("remove", &t.path, &e),
        };
        let mut deleted = Vec::new();
        let r = if m.is_dir() {
            if recursive {
                let mut all = Vec::new();
                let _ = walk(&host, &t.path, true, &mut all);
                deleted.extend(
                    all.iter()
                        .rev()
                        .filter_map(|e| e["path"].as_str().map(str::to_owned)),
                );
                std::fs::remove_dir_all(&host)
            } else {
                std::fs::remove_dir(&host)
            }
        } else {
            std::fs::remove_file(&host)
        };
        if let Err(e) = r {
            return fs_error("remove", &t.path, &e);
        }
        deleted.push(t.path.clone());
        json_response(
            StatusCode::OK,
            &json!({"count": deleted.len(), "deleted": deleted}),
        )
    })
    .await
}

/// The headers and the JSON body of a request (rename, copy, chmod, chown); the body is read as
/// axum's `Bytes` extractor reads it.
async fn json_request(req: Request) -> Result<(HeaderMap, Value), Response> {
    let headers = req.headers().clone();
    let body = Bytes::from_request(req, &())
        .await
        .map_err(IntoResponse::into_response)?;
    let v = serde_json::from_slice(&body)
        .map_err(|e| bad_request(&format!("invalid JSON body: {e}")))?;
    Ok((headers, v))
}

/// The JSON body of a `rename`/`copy` request, its `source` and its `dest` (both against
/// `workingDir`; the source as root with `asRoot`).
async fn source_dest(
    st: &State,
    name: &str,
    req: Request,
) -> Result<(Value, Target, Target), Response> {
    let (headers, v) = json_request(req).await?;
    let wd = v["workingDir"].as_str();
    let mut src = target(st, &headers, name, v["source"].as_str(), wd)?;
    let dst = target(st, &headers, name, v["dest"].as_str(), wd)?;
    as_root(&mut src, v["asRoot"].as_bool() == Some(true));
    Ok((v, src, dst))
}

pub(crate) async fn rename(st: St, Path(name): Path<String>, req: Request) -> Response {
    let (_, src, dst) = match source_dest(&st, &name, req).await {
        Ok(vsd) => vsd,
        Err(r) => return r,
    };
    src.run2(dst, |_, src, s, dst, d| match std::fs::rename(&s, &d) {
        Ok(()) => json_response(
            StatusCode::OK,
            &json!({"source": src.path, "dest": dst.path}),
        ),
        Err(e) => fs_error("rename", &src.path, &e),
    })
    .await
}

fn copy_tree(
    src: &FsPath,
    dst: &FsPath,
    shown: (&str, &str),
    out: &mut Vec<Value>,
    total: &mut u64,
) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(src)?;
    if m.is_dir() {
        std::fs::create_dir_all(dst)?;
        std::fs::set_permissions(dst, m.permissions())?;
        for n in sorted_names(src)? {
            let name = n.to_string_lossy().into_owned();
            copy_tree(
                &src.join(&n),
                &dst.join(&n),
                (
                    &format!("{}/{name}", shown.0),
                    &format!("{}/{name}", shown.1),
                ),
                out,
                total,
            )?;
        }
    } else {
        *total += std::fs::copy(src, dst)?;
        out.push(json!({"source": shown.0, "dest": shown.1}));
    }
    Ok(())
}

pub(crate) async fn copy(st: St, Path(name): Path<String>, req: Request) -> Response {
    let (v, src, dst) = match source_dest(&st, &name, req).await {
        Ok(vsd) => vsd,
        Err(r) => return r,
    };
    let not_recursive = v["recursive"].as_bool() == Some(false);
    src.run2(dst, move |_, src, s, dst, d| {
        if s.is_dir() && not_recursive {
            return fs_error(
                "copy",
                &src.path,
                &std::io::Error::from(ErrorKind::IsADirectory),
            );
        }
        let (mut copied, mut total) = (Vec::new(), 0u64);
        match copy_tree(&s, &d, (&src.path, &dst.path), &mut copied, &mut total) {
            Ok(()) => json_response(
                StatusCode::OK,
                &json!({"count": copied.len(), "copied": copied, "totalBytes": total}),
            ),
            Err(e) => fs_error("copy", &src.path, &e),
        }
    })
    .await
}

/// The JSON body of a `chmod`/`chown` request and its `path` (against `workingDir`).
async fn body_target(st: &State, name: &str, req: Request) -> Result<(Value, Target), Response> {
    let (headers, v) = json_request(req).await?;
    let t = target(
        st,
        &headers,
        name,
        v["path"].as_str(),
        v["workingDir"].as_str(),
    )?;
    Ok((v, t))
}

/// `apply` on the target and, with the body's `recursive`, on every path below it (the target first);
/// answers `{count, affected}` with what `apply` reports per path, or `op`'s error for the first
/// path it fails on.
async fn each_path<F>(t: Target, v: &Value, op: &'static str, apply: F) -> Response
where
    F: Fn(&FsPath, &str) -> std::io::Result<Value> + Send + 'static,
{
    let recursive = v["recursive"].as_bool() == Some(true);
    t.run(move |fs, t, host| {
        let mut targets = vec![(host.clone(), t.path.clone())];
        if recursive && host.is_dir() {
            let mut all = Vec::new();
            let _ = walk(&host, &t.path, true, &mut all);
            for e in all {
                if let Some(p) = e["path"].as_str() {
                    targets.push((fs.path(p), p.to_owned()));
                }
            }
        }
        let mut affected = Vec::new();
        for (host, path) in targets {
            match apply(&host, &path) {
                Ok(v) => affected.push(v),
                Err(e) => return fs_error(op, &path, &e),
            }
        }
        json_response(
            StatusCode::OK,
            &json!({"count": affected.len(), "affected": affected}),
        )
    })
    .await
}

pub(crate) async fn chmod(st: St, Path(name): Path<String>, req: Request) -> Response {
    let (v, mut t) = match body_target(&st, &name, req).await {
        Ok(vt) => vt,
        Err(r) => return r,
    };
    let Some(mode) = v["mode"].as_str().and_then(parse_mode) else {
        return bad_request("mode must be an octal string such as \"0755\"");
    };
    as_root(&mut t, v["asRoot"].as_bool() == Some(true));
    each_path(t, &v, "chmod", move |host, path| {
        std::fs::set_permissions(host, std::fs::Permissions::from_mode(mode))?;
        Ok(json!({"path": path, "mode": format!("{mode:04o}")}))
    })
    .await
}

pub(crate) async fn chown(st: St, Path(name): Path<String>, req: Request) -> Response {
    let (v, mut t) = match body_target(&st, &name, req).await {
        Ok(vt) => vt,
        Err(r) => return r,
    };
    let id = |k: &str| v[k].as_u64().and_then(|n| u32::try_from(n).ok());
    let (uid, gid) = (id("uid"), id("gid"));
    // Giving a file away needs root (the server's own privilege).
    as_root(&mut t, true);
    each_path(t, &v, "chown", move |host, path| {
        std::os::unix::fs::lchown(host, uid, gid)?;
        Ok(json!({"path": path, "uid": uid, "gid": gid}))
    })
    .await
}

#[cfg(test)]
mod tests {
    use execseam_emulator_kit::util::resolve_path;

    #[test]
    fn paths_resolve_against_the_working_dir() {
        assert_eq!(resolve_path("/home/sprite", "a.txt"), "/home/sprite/a.txt");
        assert_eq!(resolve_path("/home/sprite", "/etc/x"), "/etc/x");
        assert_eq!(resolve_path("/home/sprite", "../../../x"), "/x");
        assert_eq!(resolve_path("/", "./d/../f"), "/f");
        assert_eq!(resolve_path("/home/sprite/", "."), "/home/sprite");
    }
}
