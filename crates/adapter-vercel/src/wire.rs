//! The Vercel Sandbox wire format: request bodies, the response shapes this adapter reads, the
//! NDJSON lines of a command's stream, and the gzip'd tar of a file upload.
//!
//! Field names and optionality follow the official SDKs' validators (`validators.ts` in
//! `@vercel/sandbox` 3.5.0, `api_client.py` in `vercel-sandbox` 0.10.0); unknown fields are
//! ignored.

use std::collections::BTreeMap;
use std::io::Write as _;

use serde::{Deserialize, Serialize};

/// `POST /v3/sandboxes`.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandbox {
    /// The project (required).
    pub project_id: String,
    /// A name; the service makes one up when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `node24`, `node22`, `python3.13`, … (exclusive with `image`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// A custom image (exclusive with `runtime`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The session's lifetime, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// `{vcpus}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Environment for every command.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Tags (the labels the list filters on).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Ports to expose.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// The snapshot to start from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SnapshotSource>,
}

/// `source` of [`CreateSandbox`]: `{"type":"snapshot","snapshotId"}` (the Python SDK's
/// `SnapshotSource`).
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename = "snapshot", rename_all = "camelCase")]
pub struct SnapshotSource {
    /// The snapshot.
    pub snapshot_id: String,
}

/// `POST /v2/sandboxes/sessions/{id}/snapshot` (`_CreateSnapshotRequest`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CreateSnapshot {
    /// Its lifetime in ms (`0`: never expires; absent: the service's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration: Option<u64>,
}

/// A snapshot, as `{snapshot}` carries it (`_SnapshotPayload`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPayload {
    /// Its id.
    pub id: String,
    /// `created`, `deleted`, `failed`.
    pub status: String,
    /// Its size.
    pub size_bytes: u64,
    /// When the service deletes it (ms since the epoch), if it will.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// When it was taken (ms since the epoch).
    pub created_at: u64,
}

/// `{snapshot, session}`: the answer to a snapshot (the session is stopped).
#[derive(Clone, Debug, Deserialize)]
pub struct SnapshotAndSession {
    /// The snapshot.
    pub snapshot: SnapshotPayload,
    /// The source's session, as the snapshot left it.
    pub session: SessionPayload,
}

/// `GET /v2/sandboxes/snapshots`.
#[derive(Clone, Debug, Deserialize)]
pub struct SnapshotPage {
    /// This page.
    pub snapshots: Vec<SnapshotPayload>,
    /// `{count, next}`.
    pub pagination: Pagination,
}

/// `resources` of [`CreateSandbox`].
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Resources {
    /// Virtual CPUs (memory follows: 2048 MB each).
    pub vcpus: u32,
}

/// `POST /v2/sandboxes/sessions/{id}/cmd`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunCommand<'a> {
    /// The program (exec'd without a shell).
    pub command: &'a str,
    /// The rest of argv.
    pub args: &'a [String],
    /// The working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a str>,
    /// Environment on top of the sandbox's.
    pub env: &'a BTreeMap<String, String>,
    /// Run as root instead of `vercel-sandbox`.
    pub sudo: bool,
    /// Answer with the NDJSON stream instead of `{command}`.
    pub wait: bool,
    /// Include the output in the stream.
    pub logs: bool,
    /// Milliseconds until the service kills the command (SIGKILL, 137).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Give the command a stdin fed by `POST …/cmd/{id}/stdin`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub attach_stdin: bool,
}

/// `POST …/cmd/{id}/stdin`: base64 data at an offset (a resent request with the same offset is
/// not applied twice), or the close.
#[derive(Clone, Debug, Serialize)]
pub struct StdinWrite<'a> {
    /// The chunk, base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<&'a str>,
    /// Bytes the service has confirmed so far.
    pub offset: u64,
    /// End the input.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

/// A sandbox, as `{sandbox}` carries it.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPayload {
    /// Its name (the id this adapter uses).
    pub name: String,
    /// Its current session (required in the answer; the session comes from `{session}`).
    #[allow(dead_code)]
    pub current_session_id: String,
    /// `running`, `stopped`, …
    #[serde(default)]
    pub status: String,
    /// Tags.
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The runtime.
    #[serde(default)]
    pub runtime: Option<String>,
    /// A custom image.
    #[serde(default)]
    pub image: Option<String>,
}

/// A session, as `{session}` carries it.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionPayload {
    /// Its id.
    pub id: String,
    /// `running`, `stopped`, ….
    pub status: String,
    /// The working directory of its commands (not read: commands name theirs).
    #[allow(dead_code)]
    #[serde(default)]
    pub cwd: Option<String>,
}

/// `{sandbox, session, routes}`: create and get.
#[derive(Clone, Debug, Deserialize)]
pub struct SandboxAndSession {
    /// The sandbox.
    pub sandbox: SandboxPayload,
    /// Its current session.
    pub session: SessionPayload,
    /// One route a port declared at create.
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// `{url, port, subdomain}`: the public URL of a declared port (`SandboxRoute` in the SDKs;
/// the Python SDK hands `url` on as is; the TS SDK's `domain(port)` builds
/// `https://{subdomain}.vercel.run` itself).
#[derive(Clone, Debug, Deserialize)]
pub struct Route {
    /// `https://{subdomain}.vercel.run` on the service.
    pub url: String,
    /// The sandbox's port.
    pub port: u16,
}

/// `{sandboxes, pagination}`: list.
#[derive(Clone, Debug, Deserialize)]
pub struct SandboxPage {
    /// This page.
    pub sandboxes: Vec<SandboxPayload>,
    /// `{count, next}`.
    pub pagination: Pagination,
}

/// `{count, next}`.
#[derive(Clone, Debug, Deserialize)]
pub struct Pagination {
    /// The cursor of the next page, if any.
    #[serde(default)]
    pub next: Option<String>,
}

/// A command, as `{command}` carries it (`Command` in `validators.ts`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CommandPayload {
    /// Its id.
    pub id: String,
    /// `null` while it runs; 128+n for a signal.
    pub exit_code: Option<i32>,
    /// The program (`name`: what `command` named).
    #[serde(default)]
    pub name: String,
    /// The rest of its argv.
    #[serde(default)]
    pub args: Vec<String>,
}

/// `{command}`.
#[derive(Clone, Debug, Deserialize)]
pub struct CommandResponse {
    /// The command.
    pub command: CommandPayload,
}

/// `{commands}` (`GET …/cmd`, the Python SDK's command list).
#[derive(Clone, Debug, Deserialize)]
pub struct CommandList {
    /// The session's commands.
    pub commands: Vec<CommandPayload>,
}

/// `{"error":{"code","message"}}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ErrorBody {
    /// The error.
    #[serde(default)]
    pub error: ErrorDetail,
}

/// The inside of [`ErrorBody`].
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ErrorDetail {
    /// `not_found`, `sandbox_stopped`, `forbidden`, …
    #[serde(default)]
    pub code: String,
    /// What went wrong.
    #[serde(default)]
    pub message: String,
}

/// One line of a command's NDJSON stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// `{command}`: the first line (`exitCode: null`) or the last (the exit code).
    Command(CommandPayload),
    /// `{"stream":"stdout","data"}`.
    Stdout(String),
    /// `{"stream":"stderr","data"}`.
    Stderr(String),
    /// `{"stream":"error","data":{"code","message"}}`: the stream failed in-band.
    Error {
        /// `sandbox_stopped`, `sandbox_stream_closed`, …
        code: String,
        /// What happened.
        message: String,
    },
}

/// Parses one NDJSON line (without its `\n`). A line the SDKs would reject is an `Err`.
pub fn parse_line(line: &[u8]) -> Result<Line, String> {
    #[derive(Deserialize)]
    struct Raw {
        command: Option<CommandPayload>,
        stream: Option<String>,
        data: Option<serde_json::Value>,
    }
    let raw: Raw = serde_json::from_slice(line).map_err(|e| {
        format!(
            "malformed NDJSON line ({e}): {:?}",
            String::from_utf8_lossy(&line[..line.len().min(120)])
        )
    })?;
    if let Some(c) = raw.command {
        return Ok(Line::Command(c));
    }
    match (raw.stream.as_deref(), raw.data) {
        (Some("stdout"), Some(serde_json::Value::String(s))) => Ok(Line::Stdout(s)),
        (Some("stderr"), Some(serde_json::Value::String(s))) => Ok(Line::Stderr(s)),
        (Some("error"), Some(d)) => Ok(Line::Error {
            code: d["code"].as_str().unwrap_or("").to_owned(),
            message: d["message"].as_str().unwrap_or("").to_owned(),
        }),
        _ => Err(format!(
            "unexpected NDJSON line: {:?}",
            String::from_utf8_lossy(&line[..line.len().min(120)])
        )),
    }
}

/// The longest NDJSON line accepted (a line holds one output chunk, JSON-escaped): a longer
/// one is a `Protocol` error, so an endless line cannot grow the buffer without bound.
pub const MAX_LINE: usize = 4 << 20;

/// Splits a byte stream into `\n`-terminated lines; what is left at the end is an unterminated
/// (truncated) line. Each byte is scanned once (a long line costs linear time, not quadratic),
/// and a line is at most [`MAX_LINE`] bytes.
#[derive(Default, Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no `\n`.
    scanned: usize,
}

impl LineSplitter {
    /// Adds bytes; returns the complete lines they finish (blank lines skipped), or an error
    /// when the unfinished line is longer than [`MAX_LINE`].
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        self.buf.extend_from_slice(chunk);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(i) = self.buf[from..].iter().position(|&b| b == b'\n') {
            let end = from + i;
            let mut line = &self.buf[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            if line.len() > MAX_LINE {
                return Err(format!("an NDJSON line longer than {MAX_LINE} bytes"));
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line.to_vec());
            }
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_LINE {
            return Err(format!("an NDJSON line longer than {MAX_LINE} bytes"));
        }
        Ok(lines)
    }

    /// True if bytes of an unfinished line are held.
    pub fn has_partial(&self) -> bool {
        !self.buf.iter().all(u8::is_ascii_whitespace)
    }
}

/// One file of an upload.
#[derive(Clone, Debug)]
pub struct TarFile<'a> {
    /// The entry name: relative to the extract directory (`vercel/sandbox/a.txt` for `/`).
    pub name: &'a str,
    /// The bytes.
    pub content: &'a [u8],
    /// The mode (`0o644` unless given).
    pub mode: u32,
}

/// The body of `POST …/fs/write`: a gzip'd ustar archive of regular files (PAX `path` records
/// for names ustar cannot hold), as `tar-stream` (TS) and `tarfile` (Python) write it.
pub fn tar_gz(files: &[TarFile<'_>]) -> std::io::Result<Vec<u8>> {
    let mut tar = Vec::new();
    for f in files {
        let (name, prefix) = match split_ustar_name(f.name) {
            Some(np) => np,
            None => {
                // A PAX extended header carries the full name.
                let record = pax_record("path", f.name);
                tar.extend(header(
                    b"././@PaxHeader",
                    b"",
                    record.len() as u64,
                    0o644,
                    b'x',
                ));
                tar.extend(record.as_bytes());
                pad(&mut tar);
                let short = &f.name.as_bytes()[f.name.len().saturating_sub(99)..];
                (short, &b""[..])
            }
        };
        tar.extend(header(name, prefix, f.content.len() as u64, f.mode, b'0'));
        tar.extend_from_slice(f.content);
        pad(&mut tar);
    }
    tar.extend([0u8; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar)?;
    gz.finish()
}

fn pad(tar: &mut Vec<u8>) {
    let rem = tar.len() % 512;
    if rem != 0 {
        tar.extend(std::iter::repeat_n(0u8, 512 - rem));
    }
}

/// `(name, prefix)` for a ustar header, if the name fits (≤ 100 bytes, or split at a `/` into
/// ≤ 155 + ≤ 100).
fn split_ustar_name(name: &str) -> Option<(&[u8], &[u8])> {
    let b = name.as_bytes();
    if b.len() <= 100 {
        return Some((b, b""));
    }
    (0..b.len())
        .rev()
        .filter(|&i| b[i] == b'/')
        .find(|&i| i <= 155 && b.len() - i - 1 <= 100 && b.len() - i - 1 > 0)
        .map(|i| (&b[i + 1..], &b[..i]))
}

fn pax_record(key: &str, value: &str) -> String {
    // "<len> <key>=<value>\n", where <len> counts itself.
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}{body}").len() != len {
        len += 1;
    }
    format!("{len}{body}")
}

fn octal(field: &mut [u8], value: u64) {
    let n = field.len() - 1;
    let s = format!("{value:0n$o}");
    field[..n].copy_from_slice(&s.as_bytes()[s.len() - n..]);
    field[n] = 0;
}

fn header(name: &[u8], prefix: &[u8], size: u64, mode: u32, kind: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(mode & 0o7777));
    octal(&mut h[108..116], 0); // uid
    octal(&mut h[116..124], 0); // gid
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0); // mtime
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix);
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// The tar entry name of `path` (absolute, or relative to `cwd`), relative to the extract
/// directory `/` (the SDKs' `normalizePath`).
pub fn entry_name(path: &str, cwd: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", cwd.trim_end_matches('/'))
    };
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_as_the_sdks_parse_them() {
        let started = br#"{"command":{"id":"cmd_1","name":"echo","args":[],"cwd":"/","sessionId":"se","exitCode":null,"startedAt":1}}"#;
        assert_eq!(
            parse_line(started).unwrap(),
            Line::Command(CommandPayload {
                id: "cmd_1".into(),
                exit_code: None,
                name: "echo".into(),
                args: vec![],
            })
        );
        let done = br#"{"command":{"id":"cmd_1","exitCode":3,"durationMs":5}}"#;
        assert_eq!(
            parse_line(done).unwrap(),
            Line::Command(CommandPayload {
                id: "cmd_1".into(),
                exit_code: Some(3),
                name: String::new(),
                args: vec![],
            })
        );
        assert_eq!(
            parse_line(br#"{"stream":"stdout","data":"hi\n"}"#).unwrap(),
            Line::Stdout("hi\n".into())
        );
        assert_eq!(
            parse_line(br#"{"data":"e","stream":"stderr"}"#).unwrap(),
            Line::Stderr("e".into())
        );
        assert_eq!(
            parse_line(br#"{"stream":"error","data":{"code":"sandbox_stopped","message":"m"}}"#)
                .unwrap(),
            Line::Error {
                code: "sandbox_stopped".into(),
                message: "m".into()
            }
        );
        assert!(parse_line(b"{\"stream\":\"stdout\",\"data\":").is_err());
        assert!(parse_line(br#"{"stream":"stdout","data":3}"#).is_err());
        assert!(parse_line(br#"{"stream":"weird","data":"x"}"#).is_err());
    }

    #[test]
    fn the_splitter_keeps_partial_lines_and_reports_them() {
        let mut s = LineSplitter::default();
        assert_eq!(
            s.push(b"{\"a\":1}\n{\"b\"").unwrap(),
            vec![b"{\"a\":1}".to_vec()]
        );
        assert!(s.has_partial());
        assert_eq!(s.push(b":2}\n\n").unwrap(), vec![b"{\"b\":2}".to_vec()]);
        assert!(!s.has_partial());
    }

    #[test]
    fn an_endless_line_is_an_error_not_a_growing_buffer() {
        let mut s = LineSplitter::default();
        let piece = vec![b'x'; 64 * 1024];
        let mut failed = false;
        for _ in 0..(MAX_LINE / piece.len() + 2) {
            if s.push(&piece).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "a line over MAX_LINE must be refused");
        assert!(s.buf.len() <= MAX_LINE + piece.len());
    }

    #[test]
    fn entry_names_are_relative_to_the_root() {
        assert_eq!(
            entry_name("/vercel/sandbox/a.txt", "/vercel/sandbox"),
            "vercel/sandbox/a.txt"
        );
        assert_eq!(
            entry_name("sub/../b.txt", "/vercel/sandbox"),
            "vercel/sandbox/b.txt"
        );
        assert_eq!(entry_name("./c", "/tmp/"), "tmp/c");
    }

    #[test]
    fn tar_headers_checksum_and_names() {
        let gz = tar_gz(&[TarFile {
            name: "vercel/sandbox/a.txt",
            content: b"hello",
            mode: 0o755,
        }])
        .unwrap();
        let mut tar = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut tar).unwrap();
        assert_eq!(tar.len(), 512 + 512 + 1024);
        assert_eq!(&tar[..20], b"vercel/sandbox/a.txt");
        assert_eq!(&tar[100..107], b"0000755");
        assert_eq!(&tar[124..135], b"00000000005");
        assert_eq!(&tar[512..517], b"hello");
        let stored = u32::from_str_radix(std::str::from_utf8(&tar[148..154]).unwrap(), 8).unwrap();
        let mut h = tar[..512].to_vec();
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|&b| u32::from(b)).sum::<u32>());
    }

    #[test]
    fn long_names_use_the_prefix_or_a_pax_record() {
        let long = format!("vercel/sandbox/{}/f.txt", "d".repeat(120));
        let (name, prefix) = split_ustar_name(&long).unwrap();
        assert_eq!(name, b"f.txt");
        assert_eq!(prefix.len(), long.len() - 6);
        let huge = format!("vercel/{}", "x".repeat(300));
        assert!(split_ustar_name(&huge).is_none());
        let rec = pax_record("path", &huge);
        let n: usize = rec.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(n, rec.len());
    }
}
