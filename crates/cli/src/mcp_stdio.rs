//! The stdio transport of `execseam mcp`: every request line gets an answer.
//!
//! rmcp's stdio transport drops a line over its limit (16 MiB) with a log line, and ignores a
//! line that is not JSON on purpose (rmcp 3.11 `transport/async_rw.rs`, citing rust-sdk issue
//! #938: "replying to invalid data can trigger an error storm"). Either way the client's
//! request waits forever: the official Python client pairs answers with requests by `id`, and
//! an error with `id: null` is only logged (mcp `shared/session.py`, `_handle_response`).
//!
//! So the lines go through this reader first. A line over `--max-request` bytes is answered
//! `-32600` naming the limit; a line that is not JSON (invalid UTF-8, a NUL, truncated, not JSON
//! at all) is answered `-32700` (JSON-RPC 2.0 §5.1 "Parse error"). Both carry the request's
//! `id` when a scan of the bytes finds one at the top level of the object (wherever it is:
//! the Python client writes it early, the TypeScript one last), else `null` as JSON-RPC asks
//! when it cannot be detected. The scan keeps at most 128 bytes of the id, so an oversized line
//! is never buffered. Well-formed JSON goes to rmcp unchanged. rmcp's output and these answers
//! share stdout line by line.
//!
//! The storm rmcp guards against needs a peer that echoes errors back as more invalid data;
//! an MCP client does not (it parses what it reads), and silence is worse: a hung client.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The largest request line by default: rmcp's own limit.
pub const DEFAULT_MAX_REQUEST: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Reads requests from `input` and writes answers to `output`; returns the transport rmcp
/// serves on. The tasks end when `input` ends (rmcp then sees the end of its input) and when
/// rmcp closes its output.
pub fn transport<R, W>(
    input: R,
    output: W,
    max_request: usize,
) -> impl rmcp::transport::Transport<rmcp::RoleServer, Error = std::io::Error> + 'static
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, rmcp_reads) = tokio::io::duplex(64 << 10);
    let (rmcp_writes, from_rmcp) = tokio::io::duplex(64 << 10);
    let (lines, out) = mpsc::channel::<Vec<u8>>(16);
    tokio::spawn(write_out(out, output));
    tokio::spawn(relay_answers(from_rmcp, lines.clone()));
    tokio::spawn(read_requests(input, to_rmcp, lines, max_request));
    rmcp::transport::async_rw::AsyncRwTransport::new(rmcp_reads, rmcp_writes)
        // Lines reach it only within our limit (plus its newline).
        .with_max_line_length(max_request.saturating_add(2))
}

/// Writes each whole line to `output`, in order.
async fn write_out<W: AsyncWrite + Unpin>(mut out: mpsc::Receiver<Vec<u8>>, mut output: W) {
    while let Some(line) = out.recv().await {
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

/// rmcp's output, line by line (so an answer of ours never lands inside one of its lines).
async fn relay_answers(from_rmcp: DuplexStream, lines: mpsc::Sender<Vec<u8>>) {
    let mut r = BufReader::new(from_rmcp);
    loop {
        let mut line = Vec::new();
        match r.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if lines.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn read_requests<R: AsyncRead + Unpin>(
    input: R,
    mut to_rmcp: DuplexStream,
    answers: mpsc::Sender<Vec<u8>>,
    max: usize,
) {
    let mut r = BufReader::with_capacity(64 << 10, input);
    let mut line: Vec<u8> = Vec::new();
    // Set once the line is over the limit: only its length and its id are kept.
    let mut oversized: Option<(usize, IdScan)> = None;
    while let Ok(buf) = r.fill_buf().await {
        if buf.is_empty() {
            // The end: a last line without its newline is a request too (truncated or not).
            if oversized.is_some() || !line.is_empty() {
                let answer = judge(&mut line, oversized.take(), max);
                if !send(&mut to_rmcp, &answers, answer, &line).await {
                    return;
                }
            }
            break;
        }
        let newline = buf.iter().position(|&b| b == b'\n');
        let take = newline.map_or(buf.len(), |i| i + 1);
        let piece = &buf[..newline.unwrap_or(buf.len())];
        match &mut oversized {
            Some((n, scan)) => {
                *n += piece.len();
                scan.feed(piece);
            }
            None if line.len() + piece.len() > max => {
                let mut scan = IdScan::default();
                scan.feed(&line);
                scan.feed(piece);
                oversized = Some((line.len() + piece.len(), scan));
                line = Vec::new();
            }
            None => line.extend_from_slice(piece),
        }
        r.consume(take);
        if newline.is_some() {
            let answer = judge(&mut line, oversized.take(), max);
            let sent = send(&mut to_rmcp, &answers, answer, &line).await;
            line.clear();
            if !sent {
                return;
            }
        }
    }
    // End of input: rmcp sees the end of its own.
    let _ = to_rmcp.shutdown().await;
}

/// What to do with one line.
enum Verdict {
    /// Well-formed JSON: rmcp's.
    Forward,
    /// Answer this error line ourselves.
    Answer(Vec<u8>),
    /// An empty line: nothing.
    Skip,
}

fn judge(line: &mut Vec<u8>, oversized: Option<(usize, IdScan)>, max: usize) -> Verdict {
    if let Some((n, scan)) = oversized {
        tracing::debug!(bytes = n, max, "mcp: a request line over the limit");
        return Verdict::Answer(error_line(
            scan.id(),
            -32600,
            &format!("request too large: {n} bytes > {max} (execseam mcp --max-request)"),
        ));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
        Ok(_) => Verdict::Forward,
        Err(e) => {
            let mut scan = IdScan::default();
            scan.feed(line);
            // serde's message quotes no input, only the class and position.
            Verdict::Answer(error_line(scan.id(), -32700, &format!("Parse error: {e}")))
        }
    }
}

/// Acts on a verdict; false once the other side is gone.
async fn send(
    to_rmcp: &mut DuplexStream,
    answers: &mpsc::Sender<Vec<u8>>,
    v: Verdict,
    line: &[u8],
) -> bool {
    match v {
        Verdict::Skip => true,
        Verdict::Answer(a) => answers.send(a).await.is_ok(),
        Verdict::Forward => {
            to_rmcp.write_all(line).await.is_ok() && to_rmcp.write_all(b"\n").await.is_ok()
        }
    }
}

/// A JSON-RPC error answer line.
fn error_line(id: Option<serde_json::Value>, code: i64, message: &str) -> Vec<u8> {
    let v = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(serde_json::Value::Null),
        "error": { "code": code, "message": message },
    });
    let mut out = serde_json::to_vec(&v).expect("a JSON value serialises");
    out.push(b'\n');
    out
}

/// Finds the `"id"` member of the top-level object in a stream of bytes, keeping at most
/// [`IdScan::MAX_ID`] bytes of its value.
#[derive(Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key.
    want_key: bool,
    /// The key being read (its first bytes).
    key: Vec<u8>,
    reading_key: bool,
    /// The last key read at depth 1 was `id` and its `:` came: the value's bytes.
    value: Option<Vec<u8>>,
    /// The last key read at depth 1 was `id`.
    id_key: bool,
    found: Option<Vec<u8>>,
    too_long: bool,
}

impl IdScan {
    const MAX_ID: usize = 128;

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if let Some(v) = &mut self.value {
            // Inside the id's value (depth 1): it ends at `,` or `}` outside a string.
            let ends = !self.in_string && self.depth == 1 && (b == b',' || b == b'}');
            if !ends {
                if v.len() < Self::MAX_ID {
                    v.push(b);
                } else {
                    self.too_long = true;
                }
            } else {
                self.finish_value();
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                    self.id_key = self.key == b"id";
                }
            } else if self.reading_key && self.key.len() < 8 {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.want_key {
                    self.want_key = false;
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 && b == b'{' {
                    self.want_key = true;
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.want_key = true;
                self.id_key = false;
            }
            b':' if self.depth == 1 && self.id_key && self.found.is_none() => {
                self.value = Some(Vec::new());
                self.id_key = false;
            }
            _ => {}
        }
    }

    fn finish_value(&mut self) {
        if let Some(v) = self.value.take()
            && !self.too_long
            && self.found.is_none()
        {
            self.found = Some(v);
        }
    }

    /// The id, if one was found and is a string, a number or null.
    fn id(mut self) -> Option<serde_json::Value> {
        self.finish_value();
        let raw = self.found?;
        let v: serde_json::Value = serde_json::from_slice(raw.trim_ascii()).ok()?;
        matches!(
            v,
            serde_json::Value::String(_) | serde_json::Value::Number(_) | serde_json::Value::Null
        )
        .then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(s: &[u8]) -> Option<serde_json::Value> {
        let mut scan = IdScan::default();
        // In odd pieces, as reads come.
        for chunk in s.chunks(3) {
            scan.feed(chunk);
        }
        scan.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is() {
        use serde_json::json;
        assert_eq!(
            id_of(br#"{"jsonrpc":"2.0","id":7,"method":"x"}"#),
            Some(json!(7))
        );
        assert_eq!(
            id_of(br#"{"method":"x","params":{"id":1,"a":[{"id":2}]},"id":"abc\"d"}"#),
            Some(json!("abc\"d"))
        );
        assert_eq!(id_of(br#"{"jsonrpc":"2.0","id":7,"#), Some(json!(7)));
        assert_eq!(id_of(br#"{"jsonrpc":"2.0","id": 12 "#), Some(json!(12)));
        assert_eq!(id_of(br#"{"jsonrpc":"2.0","method":"x"}"#), None);
        assert_eq!(id_of(br#"{"id":{"x":1}}"#), None);
        assert_eq!(id_of(b"not json at all"), None);
        assert_eq!(id_of(b"\xff\xfe{\"id\":3}"), Some(json!(3)));
        assert_eq!(id_of(br#"{"x":"\"id\":5","id":null}"#), Some(json!(null)));
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(500));
        assert_eq!(id_of(long.as_bytes()), None);
    }

    async fn exchange(input: &[u8], max: usize) -> Vec<serde_json::Value> {
        let (mut client, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, mut client_out) = tokio::io::duplex(1 << 20);
        let _transport = transport(server_in, server_out, max);
        client.write_all(input).await.unwrap();
        drop(client);
        let mut got = Vec::new();
        let mut r = BufReader::new(&mut client_out);
        let mut line = String::new();
        while let Ok(Ok(n)) = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            r.read_line(&mut line),
        )
        .await
        {
            if n == 0 {
                break;
            }
            got.push(serde_json::from_str(&line).unwrap());
            line.clear();
        }
        got
    }

    #[tokio::test]
    async fn bad_and_oversized_lines_are_answered_with_their_id() {
        use serde_json::json;
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{{\"x\":\"{}\"}}}}\n",
            "a".repeat(5000)
        );
        let mut input = Vec::new();
        input.extend_from_slice(b"not json\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":7,\n");
        input.extend_from_slice(b"\xff\xfe\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"a\0\"}\n");
        input.extend_from_slice(b"\n");
        input.extend_from_slice(big.as_bytes());
        let got = exchange(&input, 1000).await;
        let summary: Vec<(serde_json::Value, i64)> = got
            .iter()
            .map(|v| (v["id"].clone(), v["error"]["code"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                (json!(null), -32700),
                (json!(7), -32700),
                (json!(null), -32700),
                (json!(8), -32700),
                (json!(9), -32600),
            ]
        );
        let msg = got[4]["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("1000") && msg.contains("--max-request"),
            "{msg}"
        );
    }
}
