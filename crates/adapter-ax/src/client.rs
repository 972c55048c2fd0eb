//! The gRPC calls: one [`Guest`] per guest handle, over one lazily connected tonic [`Channel`]
//! (h2c) that every exec and file operation of the handle shares. tonic never retries by itself; every retry decision is made in
//! [`exec`](crate::exec) with the phase in mind.

use std::time::Duration;

use bytes::Bytes;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};

use crate::config::AxConfig;
use crate::wire::{
    self, GetProcessRequest, Process, ProcessOutput, ReadFileRequest, Signal, SignalProcessRequest,
    StartProcessRequest, StreamProcessOutputRequest, WriteFileRequest, WriteProcessInputRequest,
    file_system_service_client::FileSystemServiceClient,
    process_service_client::ProcessServiceClient,
};

/// stdin and file data are sent in messages of at most this many bytes (AX reads stdin in
/// 32 KiB pieces; the guest reads files in 64 KiB chunks).
pub const CHUNK: usize = 64 * 1024;

/// One connection to one guest.
#[derive(Clone)]
pub struct Guest {
    process: ProcessServiceClient<Channel>,
    files: FileSystemServiceClient<Channel>,
    actor: Option<MetadataValue<tonic::metadata::Ascii>>,
    timeout: Duration,
}

execseam_adapter_kit::debug_fields!(self => Guest { timeout: self.timeout });

impl Guest {
    /// A guest for `config`; connects on first use (so this needs no I/O and cannot fail on the
    /// network: a dead endpoint shows up as the first call's UNAVAILABLE).
    pub fn connect(config: &AxConfig, endpoint: &str) -> Result<Guest, Status> {
        let endpoint = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| Status::invalid_argument(format!("endpoint: {e}")))?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let channel = endpoint.connect_lazy();
        let actor = match &config.target_actor {
            Some(a) => Some(
                a.parse()
                    .map_err(|_| Status::invalid_argument("target actor is not ASCII"))?,
            ),
            None => None,
        };
        Ok(Guest {
            process: ProcessServiceClient::new(channel.clone())
                .max_decoding_message_size(config.max_message_size)
                .max_encoding_message_size(config.max_message_size),
            files: FileSystemServiceClient::new(channel)
                .max_decoding_message_size(config.max_message_size)
                .max_encoding_message_size(config.max_message_size),
            actor,
            timeout: config.request_timeout,
        })
    }

    fn request<T>(&self, message: T, timeout: Option<Duration>) -> Request<T> {
        let mut r = Request::new(message);
        if let Some(actor) = &self.actor {
            r.metadata_mut()
                .insert(wire::TARGET_ACTOR_HEADER, actor.clone());
        }
        if let Some(t) = timeout {
            r.set_timeout(t);
        }
        r
    }

    /// `StartProcess`.
    pub async fn start(&self, request: StartProcessRequest) -> Result<Process, Status> {
        let r = self.request(request, Some(self.timeout));
        let mut client = self.process.clone();
        Ok(self
            .bounded("StartProcess", client.start_process(r))
            .await?
            .into_inner())
    }

    /// `GetProcess`.
    pub async fn get(&self, process_id: &str) -> Result<Process, Status> {
        let r = self.request(
            GetProcessRequest {
                process_id: process_id.to_owned(),
            },
            Some(self.timeout),
        );
        let mut client = self.process.clone();
        Ok(self
            .bounded("GetProcess", client.get_process(r))
            .await?
            .into_inner())
    }

    /// A unary call bounded on this side by the request timeout: `grpc-timeout` only asks the
    /// guest to give up, and a peer (or anything between) that never answers, or trickles the
    /// answer, would hold the call for good. `DEADLINE_EXCEEDED` with no source, as a guest
    /// answers it.
    pub async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(Status::deadline_exceeded(format!(
                "{what}: no complete answer within the request timeout of {:?}",
                self.timeout
            ))),
        }
    }

    /// `StreamProcessOutput` from the given offsets.
    pub async fn output(
        &self,
        process_id: &str,
        stdout_offset: i64,
        stderr_offset: i64,
        follow: bool,
    ) -> Result<Streaming<ProcessOutput>, Status> {
        let r = self.request(
            StreamProcessOutputRequest {
                process_id: process_id.to_owned(),
                stdout_offset,
                stderr_offset,
                follow,
            },
            None,
        );
        Ok(self
            .process
            .clone()
            .stream_process_output(r)
            .await?
            .into_inner())
    }

    /// `WriteProcessInput`: all of `data` in chunks, then (with `close`) a closing message.
    /// Returns `bytes_written`.
    pub async fn write_input(
        &self,
        process_id: &str,
        data: Bytes,
        close: bool,
    ) -> Result<i64, Status> {
        let mut messages = Vec::with_capacity(data.len() / CHUNK + 1);
        let mut rest = data;
        while !rest.is_empty() {
            let n = rest.len().min(CHUNK);
            messages.push(WriteProcessInputRequest {
                // AX sends the id on every message; the guest reads it from the first.
                process_id: process_id.to_owned(),
                data: rest.split_to(n),
                close: false,
            });
        }
        if close || messages.is_empty() {
            messages.push(WriteProcessInputRequest {
                process_id: process_id.to_owned(),
                data: Bytes::new(),
                close,
            });
        }
        let r = self.request(futures_iter(messages), None);
        Ok(self
            .process
            .clone()
            .write_process_input(r)
            .await?
            .into_inner()
            .bytes_written)
    }

    /// `SignalProcess`.
    pub async fn signal(&self, process_id: &str, signal: Signal) -> Result<Process, Status> {
        let r = self.request(
            SignalProcessRequest {
                process_id: process_id.to_owned(),
                signal: signal as i32,
            },
            Some(self.timeout),
        );
        let mut client = self.process.clone();
        Ok(self
            .bounded("SignalProcess", client.signal_process(r))
            .await?
            .into_inner())
    }

    /// `ReadFile`: the whole file.
    pub async fn read_file(&self, path: &str) -> Result<Bytes, Status> {
        let r = self.request(
            ReadFileRequest {
                path: path.to_owned(),
                mode: 0,
            },
            Some(self.timeout),
        );
        let mut stream = self.files.clone().read_file(r).await?.into_inner();
        let mut out = bytes::BytesMut::new();
        while let Some(chunk) = stream.message().await? {
            out.extend_from_slice(&chunk.chunk);
        }
        Ok(out.freeze())
    }

    /// `WriteFile`: replaces the file with `data` (one message with an empty chunk for an empty
    /// file: the guest rejects a stream without messages). Returns `bytes_written`.
    pub async fn write_file(&self, path: &str, data: Bytes, mode: u32) -> Result<i64, Status> {
        let mut messages = Vec::with_capacity(data.len() / CHUNK + 1);
        let mut rest = data;
        loop {
            let n = rest.len().min(CHUNK);
            let first = messages.is_empty();
            messages.push(WriteFileRequest {
                path: if first {
                    path.to_owned()
                } else {
                    String::new()
                },
                mode: if first { mode } else { 0 },
                seek_offset: 0,
                chunk: rest.split_to(n),
            });
            if rest.is_empty() {
                break;
            }
        }
        let r = self.request(futures_iter(messages), Some(self.timeout));
        Ok(self
            .files
            .clone()
            .write_file(r)
            .await?
            .into_inner()
            .bytes_written)
    }
}

/// A ready stream over a vector (a client-streaming request body).
fn futures_iter<T: Send + 'static>(items: Vec<T>) -> impl futures_core::Stream<Item = T> + Send {
    struct Iter<T>(std::vec::IntoIter<T>);
    impl<T> futures_core::Stream for Iter<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    impl<T> Unpin for Iter<T> {}
    Iter(items.into_iter())
}
