//! `pods/exec` over WebSocket: the upgrade, the channel frames, the status on channel 3.
//!
//! Written here rather than taken from kube's `AttachedProcess` (kube's `ws` feature), which
//! drops the `Status` body of a refused upgrade, does not say which protocol the server chose,
//! closes the whole socket to end stdin on `v4.channel.k8s.io`, and logs frames through
//! tungstenite at TRACE.
//!
//! The protocol (k8s.io/apimachinery `util/remotecommand/constants.go`, `util/httpstream/wsstream/
//! conn.go`; the apiserver's `StreamTranslator`): every message is `[channel][payload]`; channel 0
//! is stdin (client to server), 1 stdout, 2 stderr, 3 the exec's `metav1.Status` (written once,
//! then the server closes), 4 terminal resizes; `v5.channel.k8s.io` adds `[255, channel]`, which
//! closes one channel (the client closing stdin). The server picks the first protocol of the
//! client's list it supports and names it in `Sec-WebSocket-Protocol`; errors before the upgrade
//! are plain HTTP answers with a `Status` body.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use execseam_adapter_kit::retry::{NoAnswer, Stage};
use execseam_adapter_kit::text::escape_path_segment;
use execseam_adapter_kit::ws;
use execseam_core::{Error, ErrorKind, Exit, Retry};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_websockets::{Message, WebSocketStream};

use crate::client::{self, Answer, Api, adapter, no_answer};
use crate::wire::Status;

/// The channel protocol the API server speaks on an exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `v5.channel.k8s.io` (Kubernetes 1.30+, the apiserver's stream translator): stdin can be
    /// closed on its own.
    V5,
    /// `v4.channel.k8s.io` (the kubelet's own WebSocket server): no way to close stdin but
    /// closing the connection.
    V4,
}

impl Protocol {
    /// Its `Sec-WebSocket-Protocol` token.
    pub fn token(self) -> &'static str {
        match self {
            Protocol::V5 => "v5.channel.k8s.io",
            Protocol::V4 => "v4.channel.k8s.io",
        }
    }

    fn from_token(token: &str) -> Option<Protocol> {
        match token.trim() {
            "v5.channel.k8s.io" => Some(Protocol::V5),
            "v4.channel.k8s.io" => Some(Protocol::V4),
            _ => None,
        }
    }
}

/// Channel numbers.
pub(crate) const STDIN: u8 = 0;
pub(crate) const STDOUT: u8 = 1;
pub(crate) const STDERR: u8 = 2;
pub(crate) const ERROR: u8 = 3;
/// Terminal resizes: `{"Width":…,"Height":…}` (client-go `tools/remotecommand/resize.go`).
pub(crate) const RESIZE: u8 = 4;
/// v5's close signal.
pub(crate) const CLOSE: u8 = 255;

/// The largest stdin frame sent (the Python client and kubectl send 32 KiB or less).
const STDIN_FRAME: usize = 32 << 10;
/// The largest message accepted from the server (the kubelet writes at most 32 KiB; a status is
/// small): a bigger one is a broken or hostile server.
const MAX_MESSAGE: usize = 4 << 20;
/// The longest status accepted on channel 3.
const MAX_STATUS: usize = 64 << 10;

/// One exec's target and what it attaches.
pub(crate) struct ExecRequest<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub container: Option<&'a str>,
    pub argv: &'a [String],
    pub stdin: bool,
    pub tty: bool,
}

impl ExecRequest<'_> {
    /// `/api/v1/namespaces/{ns}/pods/{pod}/exec?command=…&…`: one `command` per argv element,
    /// percent-encoded (every byte but the unreserved ones).
    pub fn path(&self) -> String {
        let mut p = format!(
            "/api/v1/namespaces/{}/pods/{}/exec?",
            escape_path_segment(self.namespace),
            escape_path_segment(self.pod)
        );
        if let Some(c) = self.container {
            p.push_str("container=");
            p.push_str(&escape_path_segment(c));
            p.push('&');
        }
        for a in self.argv {
            p.push_str("command=");
            p.push_str(&escape_path_segment(a));
            p.push('&');
        }
        let flag = |b: bool| if b { "true" } else { "false" };
        p.push_str(&format!(
            "stdin={}&stdout=true&stderr={}&tty={}",
            flag(self.stdin),
            // The API server drops stderr on a terminal (kubelet `NewOptions`); asking for both
            // is refused by kube's own client.
            flag(!self.tty),
            flag(self.tty)
        ));
        p
    }
}

/// What an upgrade gave: the socket, or the server's answer instead of `101`.
pub(crate) enum Opened {
    Socket(Socket),
    Refused(Answer),
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// An open exec socket and the protocol the server chose.
pub(crate) struct Socket {
    pub ws: Ws,
    pub protocol: Protocol,
}

/// Sends the upgrade for `path`, offering `offers` in order. `Refused` carries any answer but
/// `101` (its body read, bounded): nothing ran.
pub(crate) async fn open(
    api: &Api,
    path: &str,
    offers: &[Protocol],
    op: &'static str,
) -> Result<Opened, Error> {
    let key = ws::new_key();
    let protocols: Vec<&str> = offers.iter().map(|p| p.token()).collect();
    let request = http::Request::get(path)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::SEC_WEBSOCKET_VERSION, "13")
        .header(http::header::SEC_WEBSOCKET_KEY, &key)
        .header(http::header::SEC_WEBSOCKET_PROTOCOL, protocols.join(", "))
        .body(Vec::new())
        .map_err(|e| adapter(ErrorKind::InvalidCommand, Retry::Never, op, e.to_string()))?;
    // A complete answer other than 101 ran nothing (the handler checks the pod and the
    // container, then upgrades: the answer is classified by the caller). A connection that
    // breaks before the answer may have carried the upgrade to a server that started the
    // command: a submit.
    let response = api.open(request, op, Stage::Submit).await?;
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = response.into_parts();
        let body = client::read_error(body, api.config().request_timeout).await;
        return Ok(Opened::Refused(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }));
    }
    let accept = response
        .headers()
        .get(http::header::SEC_WEBSOCKET_ACCEPT)
        .and_then(|v| v.to_str().ok());
    if accept != Some(ws::accept_key(&key).as_str()) {
        return Err(protocol_error(
            op,
            Retry::Unsafe,
            "the exec upgrade has a wrong Sec-WebSocket-Accept",
        ));
    }
    let chosen = response
        .headers()
        .get(http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let protocol = Protocol::from_token(chosen)
        .filter(|p| offers.contains(p))
        .ok_or_else(|| {
            // The process may be started already: the kubelet starts it once the streams are up.
            protocol_error(
                op,
                Retry::Unsafe,
                format!(
                    "the server chose the exec protocol {chosen:?}, not one of those offered ({})",
                    protocols.join(", ")
                ),
            )
        })?;
    let upgraded = hyper::upgrade::on(response).await.map_err(|e| {
        no_answer(
            NoAnswer::Cut,
            op,
            Stage::After,
            format!("the exec upgrade failed: {e}"),
        )
    })?;
    let limits = tokio_websockets::Limits::default().max_payload_len(Some(MAX_MESSAGE));
    let ws = tokio_websockets::ClientBuilder::new()
        .limits(limits)
        .take_over(TokioIo::new(upgraded));
    Ok(Opened::Socket(Socket { ws, protocol }))
}

fn protocol_error(op: &'static str, retry: Retry, message: impl Into<String>) -> Error {
    adapter(ErrorKind::Protocol, retry, op, message)
}

/// What the socket delivered next.
#[derive(Debug)]
pub(crate) enum Frame {
    Stdout(Bytes),
    Stderr(Bytes),
    /// The command's status (channel 3), decoded.
    Exit(Exit),
}

/// A running exec: reads stdout, stderr and the status; a task writes stdin.
pub(crate) struct Session {
    read: SplitStream<Ws>,
    writer: Option<JoinHandle<()>>,
    status: BytesMut,
    /// The status has been decoded: what is left is reading to the close.
    exit: Option<Exit>,
    done: bool,
    /// Silence (not even a pong to the heartbeat) longer than this is a dead connection.
    idle: Duration,
}

impl Session {
    /// Starts reading `socket`, and writes `stdin` to it (then, on v5, closes stdin) when
    /// `send_stdin`.
    pub fn start(socket: Socket, stdin: Option<Bytes>, idle: Duration) -> Session {
        Session::with_input(socket, stdin, None, idle)
    }

    /// Starts reading `socket`; the answered sender takes whole messages (`[channel][payload]`:
    /// keystrokes on 0, resizes on 4) until it is dropped, which closes stdin (v5).
    pub fn interactive(socket: Socket, idle: Duration) -> (Session, mpsc::Sender<Vec<u8>>) {
        let (tx, rx) = mpsc::channel(16);
        (Session::with_input(socket, None, Some(rx), idle), tx)
    }

    fn with_input(
        socket: Socket,
        stdin: Option<Bytes>,
        frames: Option<mpsc::Receiver<Vec<u8>>>,
        idle: Duration,
    ) -> Session {
        let (write, read) = socket.ws.split();
        let protocol = socket.protocol;
        let heartbeat = (idle / 3).max(Duration::from_millis(100));
        let writer = Some(tokio::spawn(writer(
            write, stdin, frames, protocol, heartbeat,
        )));
        Session {
            read,
            writer,
            status: BytesMut::new(),
            exit: None,
            done: false,
            idle,
        }
    }

    /// The next output frame, or the exit once the server closed after the status. A socket
    /// that ends without a status, or with one that cannot be read, is an error (the command may
    /// have run: `Unsafe`).
    pub async fn next(&mut self, op: &'static str) -> Result<Frame, Error> {
        loop {
            if self.done {
                return Err(protocol_error(op, Retry::Unsafe, "read after the exit"));
            }
            // After the status, the server closes at once; a little output written just before
            // it may still be queued. A server that keeps the socket open is not waited for.
            let message = if self.exit.is_some() {
                tokio::time::timeout(Duration::from_secs(2), self.read.next())
                    .await
                    .unwrap_or_default()
            } else {
                match tokio::time::timeout(self.idle, self.read.next()).await {
                    Ok(m) => m,
                    Err(_) => {
                        self.done = true;
                        self.stop_writer();
                        return Err(adapter(
                            ErrorKind::Timeout(execseam_core::Deadline::Request),
                            Retry::Unsafe,
                            op,
                            format!(
                                "no frame, not even a pong to the heartbeat, for {} ms: the connection is dead (EXECSEAM_KUBERNETES_IDLE_TIMEOUT)",
                                self.idle.as_millis()
                            ),
                        ));
                    }
                }
            };
            let message = match message {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    if let Some(exit) = self.exit.take() {
                        // The status is in: the socket's end does not matter.
                        return Ok(self.finish(exit));
                    }
                    return Err(self.cut(op, format!("the exec stream broke: {e}")));
                }
                None => {
                    if let Some(exit) = self.exit.take() {
                        return Ok(self.finish(exit));
                    }
                    if self.status.is_empty() {
                        return Err(self.cut(op, "the exec stream ended without an exit status"));
                    }
                    let exit = decode_status(&self.status, op)?;
                    return Ok(self.finish(exit));
                }
            };
            if !(message.is_binary() || message.is_text()) {
                continue; // ping, pong, close (the stream ends next)
            }
            let payload: Bytes = message.into_payload().into();
            let Some((&channel, data)) = payload.split_first() else {
                continue;
            };
            let data = payload.slice(1..1 + data.len());
            match channel {
                STDOUT if !data.is_empty() => return Ok(Frame::Stdout(data)),
                STDERR if !data.is_empty() => return Ok(Frame::Stderr(data)),
                ERROR if !data.is_empty() => {
                    if self.exit.is_some() {
                        continue;
                    }
                    if self.status.len() + data.len() > MAX_STATUS {
                        return Err(self.cut(op, "the exec status is larger than 64 KiB"));
                    }
                    self.status.extend_from_slice(&data);
                    // A status split over messages is decoded once it is whole.
                    if let Ok(status) = serde_json::from_slice::<Status>(&self.status) {
                        self.exit = Some(exit_of(&status, op)?);
                    }
                }
                // Empty first frames, v5 close signals, unknown channels.
                _ => {}
            }
        }
    }

    /// Whether the server's status arrived (even one that is an error: the exec is over then).
    pub fn status_seen(&self) -> bool {
        !self.status.is_empty()
    }

    fn finish(&mut self, exit: Exit) -> Frame {
        self.done = true;
        Frame::Exit(exit)
    }

    fn cut(&mut self, op: &'static str, message: impl Into<String>) -> Error {
        self.done = true;
        self.stop_writer();
        adapter(ErrorKind::Unavailable, Retry::Unsafe, op, message)
    }

    fn stop_writer(&mut self) {
        if let Some(w) = self.writer.take() {
            w.abort();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

/// Writes stdin (then, on v5, closes it), or the messages `frames` brings (then, once its
/// sender is dropped, closes stdin on v5), and pings every `heartbeat` so that a connection
/// that died without a close is noticed (client-go's WebSocket executor pings the same way; every
/// WebSocket server answers pings). The sink stays open until the session ends: v4 has no way
/// to end stdin but closing the socket (the caller's wrapper reads a known length instead).
async fn writer(
    mut write: SplitSink<Ws, Message>,
    stdin: Option<Bytes>,
    mut frames: Option<mpsc::Receiver<Vec<u8>>>,
    protocol: Protocol,
    heartbeat: Duration,
) {
    if let Some(data) = stdin {
        for chunk in data.chunks(STDIN_FRAME) {
            let mut frame = Vec::with_capacity(chunk.len() + 1);
            frame.push(STDIN);
            frame.extend_from_slice(chunk);
            if write.send(Message::binary(frame)).await.is_err() {
                return;
            }
        }
        if protocol == Protocol::V5
            && write
                .send(Message::binary(vec![CLOSE, STDIN]))
                .await
                .is_err()
        {
            return;
        }
    }
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    loop {
        let frame = async {
            match frames.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let message = tokio::select! {
            _ = beat.tick() => Message::ping(Bytes::new()),
            frame = frame => match frame {
                Some(f) => Message::binary(f),
                None => {
                    frames = None;
                    if protocol != Protocol::V5 {
                        continue;
                    }
                    Message::binary(vec![CLOSE, STDIN])
                }
            },
        };
        if write.send(message).await.is_err() {
            return;
        }
    }
}

/// Decodes a complete status.
fn decode_status(bytes: &[u8], op: &'static str) -> Result<Exit, Error> {
    let status: Status = serde_json::from_slice(bytes).map_err(|e| {
        protocol_error(
            op,
            Retry::Unsafe,
            format!("the exec status on channel 3 is not a Status: {e}"),
        )
    })?;
    exit_of(&status, op)
}

/// The exit a status reports (the apiserver's `codeExitToStatusError`, the kubelet's
/// `remotecommand` server): `Success` is 0; `NonZeroExitCode` carries the code as the message of
/// its `ExitCode` cause. Any other failure (`InternalError`: the runtime could not start the
/// command, the container is gone, the kubelet is unreachable) is an error, never an exit code.
pub(crate) fn exit_of(status: &Status, op: &'static str) -> Result<Exit, Error> {
    match status.status.as_deref() {
        Some("Success") => return Ok(Exit::Code(0)),
        Some("Failure") => {}
        other => {
            return Err(protocol_error(
                op,
                Retry::Unsafe,
                format!("the exec status is neither Success nor Failure: {other:?}"),
            ));
        }
    }
    if status.reason.as_deref() == Some("NonZeroExitCode") {
        let code = status
            .details
            .as_ref()
            .into_iter()
            .flat_map(|d| d.causes.iter())
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message.as_deref())
            .and_then(|m| m.trim().parse::<i32>().ok());
        return match code {
            Some(c) if (0..=255).contains(&c) => Ok(Exit::Code(c)),
            _ => Err(protocol_error(
                op,
                Retry::Unsafe,
                "NonZeroExitCode without a readable ExitCode cause",
            )),
        };
    }
    let message = status.describe();
    // containerd: `OCI runtime exec failed: … executable file not found in $PATH`; CRI-O and runc
    // say `no such file or directory`. The command never started.
    let lower = message.to_ascii_lowercase();
    if lower.contains("executable file not found")
        || (lower.contains("exec failed") && lower.contains("no such file or directory"))
    {
        return Err(adapter(
            ErrorKind::NotFound,
            Retry::Never,
            op,
            format!("the container could not start the command: {message}"),
        ));
    }
    Err(adapter(
        ErrorKind::Internal,
        Retry::Unsafe,
        op,
        format!("the command could not run to an exit: {message}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: &str) -> Status {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn statuses_become_exits_or_errors() {
        assert_eq!(
            exit_of(&status(r#"{"metadata":{},"status":"Success"}"#), "exec").unwrap(),
            Exit::Code(0)
        );
        let nonzero = r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: command terminated with exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_of(&status(nonzero), "exec").unwrap(), Exit::Code(3));
        let no_cause = r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[]}}"#;
        assert_eq!(
            exit_of(&status(no_cause), "exec").unwrap_err().kind(),
            ErrorKind::Protocol
        );
        let internal = r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: failed to exec in container: failed to start exec \"x\": OCI runtime exec failed: exec failed: unable to start container process: exec: \"nosuch\": executable file not found in $PATH: unknown","reason":"InternalError","details":{"causes":[{"message":"…"}]},"code":500}"#;
        let e = exit_of(&status(internal), "exec").unwrap_err();
        assert_eq!((e.kind(), e.retry()), (ErrorKind::NotFound, Retry::Never));
        let gone = r#"{"status":"Failure","message":"Internal error occurred: container not running","reason":"InternalError","code":500}"#;
        let e = exit_of(&status(gone), "exec").unwrap_err();
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Internal, Retry::Unsafe));
        assert!(exit_of(&status(r#"{"status":"Maybe"}"#), "exec").is_err());
    }

    #[test]
    fn the_exec_path_encodes_every_argv_element() {
        let argv = vec!["sh".to_owned(), "-c".into(), "echo hi; exit 3 & ü+%".into()];
        let r = ExecRequest {
            namespace: "default",
            pod: "pool-abcde",
            container: Some("python-runtime"),
            argv: &argv,
            stdin: true,
            tty: false,
        };
        assert_eq!(
            r.path(),
            "/api/v1/namespaces/default/pods/pool-abcde/exec?container=python-runtime&command=sh&command=-c&command=echo%20hi%3B%20exit%203%20%26%20%C3%BC%2B%25&stdin=true&stdout=true&stderr=true&tty=false"
        );
    }

    #[test]
    fn a_terminal_exec_asks_for_no_stderr() {
        // The seam for terminals (issue 37): the API server drops stderr on a tty (kubelet
        // `NewOptions`), and kube's client refuses to ask for both.
        let argv = vec!["sh".to_owned()];
        let r = ExecRequest {
            namespace: "d",
            pod: "p",
            container: None,
            argv: &argv,
            stdin: true,
            tty: true,
        };
        assert!(
            r.path()
                .ends_with("stdin=true&stdout=true&stderr=false&tty=true"),
            "{}",
            r.path()
        );
    }
}
