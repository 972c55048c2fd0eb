//! `FileSystemService`, as agent-substrate/env's `guest/filesystem` does it: paths resolved
//! against the workspace root and confined to it, 64 KiB read chunks, `WriteFile` opening the file
//! on its first message (parents 0755, mode or 0644, truncate unless `seek_offset` > 0), and a
//! stream without messages rejected.

use std::io::{Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::sync::Arc;

use execseam_ax_proto::file_system_service_server::FileSystemService;
use execseam_ax_proto::{ReadFileRequest, ReadFileResponse, WriteFileRequest, WriteFileResponse};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::{Channel, Shared};
use execseam_emulator_kit::util::clean_path;

const READ_CHUNK: usize = 64 * 1024;

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
            clean_path(req_path)
        } else {
            clean_path(&format!("{root}/{req_path}"))
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
        let (shown, mode) = (req.path.clone(), req.mode);
        let opened = guest
            .tracker
            .sandbox()
            .fs(move |fs| {
                let host = fs.path(&path);
                Ok(match std::fs::File::open(&host) {
                    Ok(f) => Ok(Some(f)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && mode != 0 => {
                        // mode != 0: create it empty (with its parents); no chunks follow.
                        if let Some(parent) = host.parent() {
                            let _ = std::fs::create_dir_all(parent);
                        }
                        create_with_mode(&host, mode).map(|()| None).map_err(|e| {
                            Status::internal(format!("failed to create file {shown:?}: {e}"))
                        })
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err(Status::not_found(format!("file {shown:?} not found")))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(
                        Status::permission_denied(format!("permission denied reading {shown:?}")),
                    ),
                    Err(e) => Err(Status::internal(format!(
                        "failed to open file {shown:?}: {e}"
                    ))),
                })
            })
            .await
            .map_err(|e| Status::unavailable(format!("the guest is unreachable: {e}")))??;
        let Some(file) = opened else {
            let (_tx, rx) = mpsc::channel(1);
            return Ok(Response::new(Box::pin(Channel(rx))));
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
                let (shown, mode, truncate) = (req.path.clone(), req.mode, req.seek_offset == 0);
                let mut f = guest
                    .tracker
                    .sandbox()
                    .fs(move |fs| {
                        let host = fs.path(&path);
                        if let Some(parent) = host.parent()
                            && let Err(e) = std::fs::create_dir_all(parent)
                        {
                            return Ok(Err(Status::internal(format!(
                                "failed to create parent directories for {shown:?}: {e}"
                            ))));
                        }
                        let mode = if mode == 0 { 0o644 } else { mode };
                        let mut options = std::fs::OpenOptions::new();
                        options.create(true).write(true);
                        if truncate {
                            options.truncate(true);
                        }
                        {
                            use std::os::unix::fs::OpenOptionsExt;
                            options.mode(mode);
                        }
                        Ok(options.open(&host).map_err(|e| {
                            if e.kind() == std::io::ErrorKind::PermissionDenied {
                                Status::permission_denied(format!(
                                    "permission denied opening {shown:?}: {e}"
                                ))
                            } else {
                                Status::internal(format!("failed to create file {shown:?}: {e}"))
                            }
                        }))
                    })
                    .await
                    .map_err(|e| Status::unavailable(format!("the guest is unreachable: {e}")))??;
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
