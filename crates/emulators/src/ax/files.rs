//! `FileSystemService`, as agent-substrate/env's `guest/filesystem` does it: paths resolved
//! against the workspace root and confined to it, 64 KiB read chunks, `WriteFile` opening the file
//! on its first message (parents 0755, mode or 0644, truncate unless `seek_offset` > 0), and a
//! stream without messages rejected.

use std::io::{Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::sync::Arc;

use execseam_ax::wire::file_system_service_server::FileSystemService;
use execseam_ax::wire::{ReadFileRequest, ReadFileResponse, WriteFileRequest, WriteFileResponse};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::{Channel, Shared};

const READ_CHUNK: usize = 64 * 1024;

/// Lexically cleans an absolute path (Go's filepath.Clean).
pub(crate) fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

pub(crate) struct Files {
    pub(crate) shared: Arc<Shared>,
}

impl Files {
    /// resolveAndValidatePath.
    fn resolve(&self, req_path: &str) -> Result<String, Status> {
        if req_path.is_empty() {
            return Err(Status::invalid_argument("file path cannot be empty"));
        }
        let root = &self.shared.files_root;
        let target = if req_path.starts_with('/') {
            clean(req_path)
        } else {
            clean(&format!("{root}/{req_path}"))
        };
        if self.shared.confine_files && root != "/" {
            let prefix = format!("{root}/");
            if target != *root && !target.starts_with(&prefix) {
                return Err(Status::permission_denied(format!(
                    "access denied: path {req_path:?} is outside sandbox root directory {root:?}"
                )));
            }
        }
        Ok(target)
    }
}

#[tonic::async_trait]
impl FileSystemService for Files {
    type ReadFileStream = Pin<Box<Channel<ReadFileResponse>>>;

    async fn read_file(
        &self,
        request: Request<ReadFileRequest>,
    ) -> Result<Response<Self::ReadFileStream>, Status> {
        let guest = self.shared.route(&request)?;
        let req = request.into_inner();
        let path = self.resolve(&req.path)?;
        let host = guest.tracker.sandbox().host_path(&path);
        let file = match std::fs::File::open(&host) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && req.mode != 0 => {
                // mode != 0: create it empty (with its parents); the stream ends with no chunks.
                if let Some(parent) = host.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                create_with_mode(&host, req.mode).map_err(|e| {
                    Status::internal(format!("failed to create file {:?}: {e}", req.path))
                })?;
                let (_tx, rx) = mpsc::channel(1);
                return Ok(Response::new(Box::pin(Channel(rx))));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Status::not_found(format!("file {:?} not found", req.path)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Status::permission_denied(format!(
                    "permission denied reading {:?}",
                    req.path
                )));
            }
            Err(e) => {
                return Err(Status::internal(format!(
                    "failed to open file {:?}: {e}",
                    req.path
                )));
            }
        };
        let (tx, rx) = mpsc::channel(4);
        let name = req.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut file = file;
            let mut buf = vec![0u8; READ_CHUNK];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        let chunk = ReadFileResponse {
                            chunk: bytes::Bytes::copy_from_slice(&buf[..n]),
                        };
                        if tx.blocking_send(Ok(chunk)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(Status::internal(format!(
                            "failed to read file {name:?}: {e}"
                        ))));
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(Channel(rx))))
    }

    async fn write_file(
        &self,
        request: Request<Streaming<WriteFileRequest>>,
    ) -> Result<Response<WriteFileResponse>, Status> {
        let guest = self.shared.route(&request)?;
        let mut stream = request.into_inner();
        let mut file: Option<(std::fs::File, String)> = None;
        let mut total: i64 = 0;
        while let Some(req) = stream.message().await? {
            if file.is_none() {
                let path = self.resolve(&req.path)?;
                if req.seek_offset < 0 {
                    return Err(Status::invalid_argument("seek_offset cannot be negative"));
                }
                let host = guest.tracker.sandbox().host_path(&path);
                if let Some(parent) = host.parent()
                    && let Err(e) = std::fs::create_dir_all(parent)
                {
                    return Err(Status::internal(format!(
                        "failed to create parent directories for {:?}: {e}",
                        req.path
                    )));
                }
                let mode = if req.mode == 0 { 0o644 } else { req.mode };
                let mut options = std::fs::OpenOptions::new();
                options.create(true).write(true);
                if req.seek_offset == 0 {
                    options.truncate(true);
                }
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    options.mode(mode);
                }
                let mut f = options.open(&host).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        Status::permission_denied(format!(
                            "permission denied opening {:?}: {e}",
                            req.path
                        ))
                    } else {
                        Status::internal(format!("failed to create file {:?}: {e}", req.path))
                    }
                })?;
                if req.seek_offset > 0 {
                    f.seek(SeekFrom::Start(req.seek_offset as u64))
                        .map_err(|e| {
                            Status::internal(format!("failed to seek in {:?}: {e}", req.path))
                        })?;
                }
                file = Some((f, req.path.clone()));
            }
            let (f, name) = file.as_mut().expect("opened above");
            if !req.chunk.is_empty() {
                f.write_all(&req.chunk).map_err(|e| {
                    Status::internal(format!("failed to write to file {name:?}: {e}"))
                })?;
                total += req.chunk.len() as i64;
            }
        }
        match file {
            None => Err(Status::invalid_argument("no file data received")),
            Some((f, name)) => {
                f.sync_all()
                    .map_err(|e| Status::internal(format!("failed to close file {name:?}: {e}")))?;
                Ok(Response::new(WriteFileResponse {
                    bytes_written: total,
                }))
            }
        }
    }
}

fn create_with_mode(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .mode(mode)
        .open(path)
        .map(drop)
}
