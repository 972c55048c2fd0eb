//! The bridge Worker's wire format (`@cloudflare/sandbox/bridge`, OpenAPI "Cloudflare Sandbox
//! Service API"), with the names the bridge uses, and its exec SSE framing.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// `POST /v1/sandbox/{id}/exec` body (`ExecRequest`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Non-empty; the bridge shell-quotes each element and joins them into one `bash -c` string.
    pub argv: Vec<String>,
    /// Per-call timeout in milliseconds (the SDK's `exec({timeout})`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Working directory; must resolve inside `/workspace` (403 otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Every bridge error body (`ErrorResponse`), before the stream and inside an SSE `error` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// Human-readable description.
    pub error: String,
    /// Stable machine-readable code (`unauthorized`, `invalid_request`, `exec_error`, …).
    pub code: String,
}

/// `POST /v1/sandbox` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSandboxResponse {
    /// 26 lowercase base32 characters.
    pub id: String,
}

/// `PUT /v1/sandbox/{id}/file/{path}` answer (`WriteResponse`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteResponse {
    /// Always true.
    pub ok: bool,
}

/// `GET /v1/sandbox/{id}/running` answer (`RunningResponse`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningResponse {
    /// Whether a no-op command succeeded.
    pub running: bool,
}

/// `POST /v1/sandbox/{id}/tunnel/{port}` answer (the document's `Tunnel`; `id`, `hostname` and
/// `createdAt` are not read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelResponse {
    /// The container port it serves.
    pub port: u16,
    /// Its public URL (`https://<random>.trycloudflare.com` on the service).
    pub url: String,
}

/// `POST /v1/sandbox/{id}/session` body.
#[cfg(test)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSessionRequest {
    /// A custom session id (generated if omitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Initial working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Session environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
}

/// `POST /v1/sandbox/{id}/session` answer.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSessionResponse {
    /// The id to send as `Session-Id`.
    pub id: String,
}

/// The data of the terminal `exit` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitData {
    /// The exit status. The bridge sends `result.exitCode`; if that were undefined the key would
    /// be missing, and the adapter reports a protocol error rather than inventing a status.
    pub exit_code: i64,
}

/// One event of the exec stream, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    /// `event: stdout`, base64 decoded.
    Stdout(Bytes),
    /// `event: stderr`, base64 decoded.
    Stderr(Bytes),
    /// `event: exit` (terminal): `{"exit_code": N}`.
    Exit(i64),
    /// `event: error` (terminal): `{"error", "code"}`.
    Error(ErrorResponse),
    /// Any other event name (ignored by the adapter; SSE says unknown events are skipped).
    Other(String),
}

/// A raw server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// An incremental SSE decoder (WHATWG rules: CR, LF or CRLF line ends; `field: value` with one
/// optional space; comments; an event is dispatched on a blank line; an unterminated event at
/// the end of the stream is discarded).
#[derive(Debug)]
pub struct SseDecoder {
    buf: BytesMut,
    /// The longest line accepted ([`MAX_SSE_LINE`] unless set).
    max_line: usize,
    /// The largest event accepted, its data lines together (twice the longest line).
    max_event: usize,
    /// How much of `buf` is known to hold no line end (each byte is scanned once).
    scanned: usize,
    event: Option<String>,
    data: Vec<String>,
    /// The bytes of the event's data lines so far.
    data_len: usize,
    skip_lf: bool,
}

/// The longest SSE line accepted: an output event carries one base64 chunk of the command's
/// output (the bridge sends what one read returns, far less than this).
pub const MAX_SSE_LINE: usize = 16 << 20;

impl Default for SseDecoder {
    fn default() -> SseDecoder {
        SseDecoder::with_limit(MAX_SSE_LINE)
    }
}

impl SseDecoder {
    /// A fresh decoder that accepts lines of at most `max_line` bytes and events of at most
    /// twice that.
    pub fn with_limit(max_line: usize) -> SseDecoder {
        SseDecoder {
            buf: BytesMut::new(),
            max_line,
            max_event: max_line.saturating_mul(2),
            scanned: 0,
            event: None,
            data: Vec::new(),
            data_len: 0,
            skip_lf: false,
        }
    }

    /// Feeds bytes; returns the events completed by them. Fails on a line that is not UTF-8.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut chunk = chunk;
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            // Only the bytes not scanned yet: a long line costs its length once, not per chunk.
            let Some(rel) = self.buf[self.scanned..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
            else {
                self.scanned = self.buf.len();
                if self.buf.len() > self.max_line {
                    return Err(format!(
                        "an SSE line longer than {} bytes (the answer is not an event stream)",
                        self.max_line
                    ));
                }
                break;
            };
            let pos = self.scanned + rel;
            self.scanned = 0;
            if pos > self.max_line {
                return Err(format!("an SSE line longer than {} bytes", self.max_line));
            }
            let line = self.buf.split_to(pos);
            let end = self.buf.split_to(1)[0];
            if end == b'\r' {
                if self.buf.is_empty() {
                    self.skip_lf = true;
                } else if self.buf[0] == b'\n' {
                    let _ = self.buf.split_to(1);
                }
            }
            let line = std::str::from_utf8(&line)
                .map_err(|_| "an SSE line is not UTF-8".to_owned())?
                .to_owned();
            if let Some(ev) = self.line(&line)? {
                out.push(ev);
            }
        }
        Ok(out)
    }

    /// True if bytes or fields of an undispatched event are pending (the stream was cut inside
    /// an event).
    pub fn pending(&self) -> bool {
        !self.buf.is_empty() || self.event.is_some() || !self.data.is_empty()
    }

    fn line(&mut self, line: &str) -> Result<Option<SseEvent>, String> {
        if line.is_empty() {
            if self.event.is_none() && self.data.is_empty() {
                return Ok(None);
            }
            self.data_len = 0;
            return Ok(Some(SseEvent {
                event: self.event.take().unwrap_or_else(|| "message".into()),
                data: std::mem::take(&mut self.data).join("\n"),
            }));
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data_len += value.len() + 1;
                if self.data_len > self.max_event {
                    return Err(format!("an SSE event larger than {} bytes", self.max_event));
                }
                self.data.push(value.to_owned());
            }
            _ => {} // id, retry and unknown fields do not matter here
        }
        Ok(None)
    }
}

/// Interprets one SSE event of the exec stream. A malformed payload is an `Err` (the caller
/// reports a protocol error): base64 that does not decode, an `exit` without an integer
/// `exit_code`, an `error` that is not `{"error","code"}`.
pub fn exec_event(ev: &SseEvent) -> Result<ExecEvent, String> {
    match ev.event.as_str() {
        "stdout" | "stderr" => {
            let bytes = STANDARD
                .decode(ev.data.as_bytes())
                .map_err(|e| format!("{} event is not base64 ({e})", ev.event))?;
            let b = Bytes::from(bytes);
            Ok(if ev.event == "stdout" {
                ExecEvent::Stdout(b)
            } else {
                ExecEvent::Stderr(b)
            })
        }
        "exit" => {
            let exit: ExitData = serde_json::from_str(&ev.data).map_err(|e| {
                format!(
                    "exit event {:?} is not {{\"exit_code\": N}} ({e})",
                    short(&ev.data)
                )
            })?;
            Ok(ExecEvent::Exit(exit.exit_code))
        }
        "error" => {
            let err: ErrorResponse = serde_json::from_str(&ev.data).map_err(|e| {
                format!(
                    "error event {:?} is not {{\"error\", \"code\"}} ({e})",
                    short(&ev.data)
                )
            })?;
            Ok(ExecEvent::Error(err))
        }
        other => Ok(ExecEvent::Other(other.to_owned())),
    }
}

fn short(s: &str) -> String {
    if s.len() <= 120 {
        s.to_owned()
    } else {
        let mut end = 120;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `with_limit` (the adapter's `max_answer_bytes`) caps a line, and an event at twice it.
    #[test]
    fn the_decoder_limits_are_the_configured_ones() {
        let mut d = SseDecoder::with_limit(1024);
        assert!(d.push(&[b'x'; 1024]).unwrap().is_empty());
        let e = d.push(b"x").unwrap_err();
        assert!(e.contains("longer than 1024 bytes"), "{e}");
        // A line of the limit passes; data lines together may reach twice it, not more.
        let mut d = SseDecoder::with_limit(1024);
        let line = format!("data: {}\n", "y".repeat(1000));
        assert!(d.push(line.as_bytes()).unwrap().is_empty());
        assert!(d.push(line.as_bytes()).unwrap().is_empty());
        let e = d.push(line.as_bytes()).unwrap_err();
        assert!(e.contains("larger than 2048 bytes"), "{e}");
        // The default is the constant.
        let mut d = SseDecoder::default();
        assert!(d.push(&vec![b'x'; 64 << 10]).unwrap().is_empty());
    }

    /// A never-ending line is scanned once per byte, not once per chunk, and fails at the cap.
    #[test]
    fn a_never_ending_line_is_linear_and_capped() {
        let start = std::time::Instant::now();
        let mut d = SseDecoder::default();
        let chunk = vec![b'x'; 4096];
        let mut fed = 0usize;
        let err = loop {
            match d.push(&chunk) {
                Ok(events) => assert!(events.is_empty()),
                Err(e) => break e,
            }
            fed += chunk.len();
            assert!(fed <= MAX_SSE_LINE + chunk.len(), "no cap");
        };
        assert!(err.contains("longer than"), "{err}");
        // Quadratic rescanning of 16 MiB in 4 KiB chunks takes minutes; linear, milliseconds.
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        // Lines split across chunks still decode.
        let mut d = SseDecoder::default();
        assert!(d.push(b"data: {\"a\"").unwrap().is_empty());
        let ev = d.push(b":1}\n\n").unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].data, "{\"a\":1}");
    }

    /// The exact bytes the bridge's `writeSSE` produces (`event: X\ndata: Y\n\n`).
    fn frame(event: &str, data: &str) -> String {
        format!("event: {event}\ndata: {data}\n\n")
    }

    #[test]
    fn decodes_the_bridge_framing_across_arbitrary_splits() {
        let wire = [
            frame("stdout", "aGk="),
            frame("stderr", "ZQ=="),
            frame("exit", "{\"exit_code\":3}"),
        ]
        .concat();
        for split in 0..wire.len() {
            let mut d = SseDecoder::default();
            let mut evs = d.push(&wire.as_bytes()[..split]).unwrap();
            evs.extend(d.push(&wire.as_bytes()[split..]).unwrap());
            let decoded: Vec<_> = evs.iter().map(|e| exec_event(e).unwrap()).collect();
            assert_eq!(
                decoded,
                vec![
                    ExecEvent::Stdout(Bytes::from_static(b"hi")),
                    ExecEvent::Stderr(Bytes::from_static(b"e")),
                    ExecEvent::Exit(3)
                ],
                "split at {split}"
            );
            assert!(!d.pending());
        }
    }

    #[test]
    fn crlf_comments_and_multiline_data() {
        let mut d = SseDecoder::default();
        let evs = d
            .push(b": keepalive\r\nevent: error\r\ndata: {\"error\":\"a\",\r")
            .unwrap();
        assert!(evs.is_empty());
        let evs = d.push(b"\ndata: \"code\":\"exec_error\"}\r\n\r\n").unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "{\"error\":\"a\",\n\"code\":\"exec_error\"}");
        assert_eq!(
            exec_event(&evs[0]).unwrap(),
            ExecEvent::Error(ErrorResponse {
                error: "a".into(),
                code: "exec_error".into()
            })
        );
    }

    #[test]
    fn an_unterminated_event_is_pending_not_dispatched() {
        let mut d = SseDecoder::default();
        assert!(
            d.push(b"event: exit\ndata: {\"exit_code\":0}\n")
                .unwrap()
                .is_empty()
        );
        assert!(d.pending());
    }

    #[test]
    fn malformed_payloads_are_errors() {
        let bad = |event: &str, data: &str| {
            exec_event(&SseEvent {
                event: event.into(),
                data: data.into(),
            })
            .unwrap_err()
        };
        bad("stdout", "!!!");
        bad("exit", "{}");
        bad("exit", "{\"exit_code\":null}");
        bad("exit", "{\"exit_code\":\"0\"}");
        bad("exit", "{\"exit_code\":1.5}");
        bad("error", "{\"error\":\"x\"}");
        assert_eq!(
            exec_event(&SseEvent {
                event: "ping".into(),
                data: String::new()
            })
            .unwrap(),
            ExecEvent::Other("ping".into())
        );
    }

    #[test]
    fn request_omits_unset_fields() {
        let r = ExecRequest {
            argv: vec!["true".into()],
            timeout_ms: None,
            cwd: None,
        };
        assert_eq!(serde_json::to_string(&r).unwrap(), "{\"argv\":[\"true\"]}");
        let r = ExecRequest {
            argv: vec!["sh".into(), "-lc".into(), "echo hello".into()],
            timeout_ms: Some(30000),
            cwd: Some("/workspace".into()),
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            "{\"argv\":[\"sh\",\"-lc\",\"echo hello\"],\"timeout_ms\":30000,\"cwd\":\"/workspace\"}"
        );
    }
}
