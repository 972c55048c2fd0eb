//! `POST …/fs/{write,read,mkdir}`. Every operation runs inside the sandbox, so files get the
//! sandbox user's ownership and permissions as on the real service.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use execseam_core::{Command, Exec, Output};
use serde_json::{Value, json};

use super::CWD;
use super::routes::{St, api_error, bad_request, json_body, not_found, ok, stopped};
use super::state::{Session, sandbox_user};
use execseam_emulator_kit::Isolation;
use execseam_emulator_kit::util::resolve_path;

const MAX_UPLOAD: usize = 256 * 1024 * 1024;

/// Runs a small script in the sandbox as its user.
async fn sh(session: &Session, script: &str, args: &[&str], stdin: Option<Bytes>) -> Output {
    let mut argv = vec!["/bin/sh", "-c", script, "sh"];
    argv.extend_from_slice(args);
    let mut b = Command::builder(argv);
    if let Some(s) = stdin {
        b = b.stdin(s);
    }
    let cmd = b.build().expect("valid argv");
    match session.root.exec_as(&sandbox_user()).exec(cmd).await {
        Ok(o) => o,
        Err(e) => Output::new(
            Vec::new(),
            e.message().as_bytes().to_vec(),
            execseam_core::Exit::Code(125),
        ),
    }
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_owned()
}

pub(crate) async fn op(st: St, Path((sid, op)): Path<(String, String)>, req: Request) -> Response {
    let Some(session) = st.session(&sid) else {
        return not_found("Session", &sid);
    };
    if !matches!(op.as_str(), "write" | "read" | "mkdir") {
        return api_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("No filesystem op: {op}"),
        );
    }
    if !session.is_running() {
        return stopped();
    }
    let extract_dir = req
        .headers()
        .get("x-cwd")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("/")
        .to_owned();
    let Ok(body) = axum::body::to_bytes(req.into_body(), MAX_UPLOAD).await else {
        return api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "The upload is too large",
        );
    };
    match op.as_str() {
        "write" => write(&session, &resolve_path(CWD, &extract_dir), body).await,
        "read" => read(&session, &body).await,
        _ => mkdir(&session, &body).await,
    }
}

fn path_of(body: &Bytes) -> Result<(String, bool), Response> {
    let body = json_body(body)?;
    let Some(path) = body
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    else {
        return Err(bad_request("path is required"));
    };
    let cwd = body.get("cwd").and_then(Value::as_str).unwrap_or(CWD);
    let recursive = body
        .get("recursive")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((resolve_path(&resolve_path(CWD, cwd), path), recursive))
}

/// The body is a gzip'd tar whose entry names are relative to `x-cwd`; `tar` runs in the
/// sandbox, keeping each entry's mode.
async fn write(session: &Arc<Session>, dir: &str, body: Bytes) -> Response {
    if session.root.isolation() == Isolation::Translate {
        return write_translated(session, dir, body).await;
    }
    let out = sh(
        session,
        r#"exec tar -xzpf - --no-same-owner -C "$1""#,
        &[&session.root.visible_path(dir)],
        Some(body),
    )
    .await;
    if !out.exit.success() {
        return bad_request(&format!(
            "Failed to extract the archive: {}",
            stderr_of(&out)
        ));
    }
    ok(json!({}))
}

/// Without a mount namespace the archive is unpacked in a scratch directory and each file moved
/// to where the sandbox sees it (the documented degradation).
async fn write_translated(session: &Arc<Session>, dir: &str, body: Bytes) -> Response {
    let scratch = format!(
        "/tmp/.execseam-vercel-upload-{}",
        execseam_emulator_kit::clock::hex_id(12)
    );
    let out = sh(
        session,
        r#"mkdir -p "$1" && exec tar -xzpf - --no-same-owner -C "$1""#,
        &[&session.root.visible_path(&scratch)],
        Some(body),
    )
    .await;
    if !out.exit.success() {
        return bad_request(&format!(
            "Failed to extract the archive: {}",
            stderr_of(&out)
        ));
    }
    let dir = dir.to_owned();
    let moved = session
        .root
        .fs_as(&sandbox_user(), move |fs| {
            let base = fs.path(&scratch);
            let r = move_tree(fs, &base, &base, &dir);
            let _ = std::fs::remove_dir_all(&base);
            r
        })
        .await;
    match moved {
        Ok(()) => ok(json!({})),
        Err(e) => bad_request(&format!("Failed to extract the archive: {e}")),
    }
}

fn move_tree(
    fs: &execseam_emulator_kit::Fs,
    base: &std::path::Path,
    at: &std::path::Path,
    dir: &str,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(at)? {
        let path = entry?.path();
        if path.is_dir() {
            move_tree(fs, base, &path, dir)?;
            continue;
        }
        let rel = path.strip_prefix(base).map_err(std::io::Error::other)?;
        let target = fs.path(&resolve_path(dir, &rel.to_string_lossy()));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&path, &target).or_else(|_| std::fs::copy(&path, &target).map(drop))?;
    }
    Ok(())
}

async fn read(session: &Arc<Session>, body: &Bytes) -> Response {
    let (path, _) = match path_of(body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let p = path.clone();
    let got = session
        .root
        .fs_as(&sandbox_user(), move |fs| std::fs::read(fs.path(&p)))
        .await;
    match got {
        Ok(bytes) => {
            let mut r = Response::new(Body::from(bytes));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => api_error(
            StatusCode::NOT_FOUND,
            "file_not_found",
            &format!("File not found: {path}"),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
            bad_request(&format!("Path is a directory: {path}"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => api_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!("Cannot read {path}: permission denied"),
        ),
        Err(e) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_server_error",
            &format!("Cannot read {path}: {e}"),
        ),
    }
}

async fn mkdir(session: &Arc<Session>, body: &Bytes) -> Response {
    let (path, recursive) = match path_of(body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let p = path.clone();
    let made = session
        .root
        .fs_as(&sandbox_user(), move |fs| {
            if recursive {
                std::fs::create_dir_all(fs.path(&p))
            } else {
                std::fs::create_dir(fs.path(&p))
            }
        })
        .await;
    match made {
        Ok(()) => ok(json!({})),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => api_error(
            StatusCode::NOT_FOUND,
            "path_not_found",
            &format!("Parent directory not found: {path}"),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            bad_request(&format!("Path already exists: {path}"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => api_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!("Cannot create {path}: permission denied"),
        ),
        Err(e) => bad_request(&format!("mkdir failed: {e}")),
    }
}
