//! Pieces the streaming emulators (Vercel, Northflank) share: incremental UTF-8 decoding of a
//! command's output, and a FIFO that feeds a running command's stdin chunk by chunk.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::harness::Sandbox;
use crate::harness::clock::hex_id;

/// Incremental UTF-8 decoding: a sequence split across chunks is joined; invalid bytes become
/// U+FFFD (what a text-only wire can carry).
#[derive(Default)]
pub(crate) struct Utf8 {
    pending: Vec<u8>,
}

impl Utf8 {
    pub(crate) fn push(&mut self, chunk: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(chunk);
        let mut out = String::new();
        let mut rest: &[u8] = &buf;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    return out;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("valid prefix"));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &after[n..];
                        }
                        None => {
                            self.pending = after.to_vec();
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// The end of the stream: an unfinished sequence becomes one U+FFFD.
    pub(crate) fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            "\u{FFFD}".to_owned()
        }
    }
}

/// The writer end of a command's stdin FIFO and how many bytes went through it.
///
/// Until the command opens the FIFO, the emulator holds it read-write (so neither side's open
/// blocks); once it has (its wrapper removes the path), a write-only end replaces that one, so a
/// command that exits or closes its stdin makes the next write fail (EPIPE), as a pipe does.
pub(crate) struct StdinFifo {
    tx: Option<tokio::net::unix::pipe::Sender>,
    host: PathBuf,
    written: u64,
    write_only: bool,
}

impl StdinFifo {
    /// Makes a FIFO under `dir` (a sandbox path); returns it and the path its commands see. The
    /// command must open it as stdin, then remove the path (the sign [`close`](Self::close)
    /// waits for): `exec 0<"$f"; rm -f -- "$f"`.
    pub(crate) async fn create(
        sandbox: &Sandbox,
        dir: &str,
    ) -> std::io::Result<(StdinFifo, String)> {
        let name = format!("{dir}/stdin-{}", hex_id(16));
        let host = sandbox.host_path(&name);
        if let Some(parent) = host.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let status = tokio::process::Command::new("mkfifo")
            .arg("-m")
            .arg("600")
            .arg(&host)
            .status()
            .await?;
        if !status.success() {
            return Err(std::io::Error::other(format!("mkfifo failed: {status}")));
        }
        let tx = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_sender(&host)?;
        Ok((
            StdinFifo {
                tx: Some(tx),
                host,
                written: 0,
                write_only: false,
            },
            sandbox.visible_path(&name),
        ))
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// False once closed, or once a write found no reader.
    pub(crate) fn is_open(&self) -> bool {
        self.tx.is_some()
    }

    /// Waits (up to 5 s) for the command to open the FIFO, then swaps the read-write end for a
    /// write-only one opened through `/proc/self/fd` (the path is gone by then).
    async fn attach(&mut self) {
        if self.write_only || self.tx.is_none() {
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.host.exists() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if self.host.exists() {
            return; // never opened: keep the read-write end
        }
        use std::os::fd::AsRawFd;
        let fd = self.tx.as_ref().expect("open").as_raw_fd();
        match tokio::net::unix::pipe::OpenOptions::new().open_sender(format!("/proc/self/fd/{fd}"))
        {
            Ok(w) => {
                self.tx = Some(w);
                self.write_only = true;
            }
            // ENXIO: no reader any more (the command is gone).
            Err(_) => self.tx = None,
        }
    }

    /// Writes `data`; `false` when the command no longer reads (the writer is then closed).
    pub(crate) async fn write(&mut self, data: &[u8]) -> bool {
        self.attach().await;
        let Some(tx) = self.tx.as_mut() else {
            return false;
        };
        if tx.write_all(data).await.is_err() {
            self.tx = None;
            return false;
        }
        self.written += data.len() as u64;
        true
    }

    /// Closes the writer (EOF) once the command has opened the FIFO: a reader that opens it
    /// with no writer left would block forever.
    pub(crate) async fn close(&mut self) {
        self.attach().await;
        self.tx = None;
    }
}

impl Drop for StdinFifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.host);
    }
}
