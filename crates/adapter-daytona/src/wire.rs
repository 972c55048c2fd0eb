//! Daytona's wire format, spelled as Daytona spells it (camelCase JSON).
//!
//! Sources: the generated clients `daytona_api_client` and `daytona_toolbox_api_client` 0.226.1
//! (`models/*.py`) and the daemon source (`apps/daemon/pkg/toolbox/**`). Unknown fields are
//! ignored on input; optional fields are omitted on output, as the official SDK does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The header whose value selects the daemon's response shapes (see [`SDK_VERSION`]).
pub const SDK_VERSION_HEADER: &str = "X-Daytona-SDK-Version";
/// The SDK version we announce. Daemons answer clients at 0.167.0 or later with the session
/// output already split into `stdout` and `stderr` (and JSON from the plain logs route).
pub const SDK_VERSION: &str = "0.226.1";
/// The source header the official SDKs send (`sdk-python`, `sdk-typescript`); ours.
pub const SOURCE_HEADER: &str = "X-Daytona-Source";
/// Organization header, used with a JWT instead of an API key.
pub const ORGANIZATION_HEADER: &str = "X-Daytona-Organization-ID";

/// The stdout marker in a session's log: each stdout line starts with it.
pub const STDOUT_PREFIX: &[u8; 3] = b"\x01\x01\x01";
/// The stderr marker in a session's log: each stderr line starts with it.
pub const STDERR_PREFIX: &[u8; 3] = b"\x02\x02\x02";

/// `POST /sandbox` body (`CreateSandbox`). The SDK's default body is
/// `{"env": {}, "labels": {"code-toolbox-language": "python"}, "volumes": []}`.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandbox {
    /// Environment variables of the sandbox.
    pub env: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Volumes to mount (none by default).
    pub volumes: Vec<serde_json::Value>,
    /// The snapshot to start from; the organization's default when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The region.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Minutes of inactivity before the sandbox stops (0 disables).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_stop_interval: Option<u32>,
    /// Minutes after stopping before the sandbox is deleted (0: at once; negative: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_delete_interval: Option<i32>,
}

/// The `Sandbox` DTO, reduced to what the adapter reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// The sandbox id.
    pub id: String,
    /// `started`, `creating`, `stopped`, `error`, …; absent on some list items.
    #[serde(default)]
    pub state: Option<String>,
    /// The reason for an `error` state.
    #[serde(default)]
    pub error_reason: Option<String>,
    /// `{region proxy}/toolbox`; empty on list items (then `GET /sandbox/{id}/toolbox-proxy-url`).
    #[serde(default)]
    pub toolbox_proxy_url: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The snapshot it was created from.
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Minutes after stopping before the sandbox is deleted (0: when it stops; negative: never).
    #[serde(default)]
    pub auto_delete_interval: Option<i64>,
}

/// `POST /sandbox/{id}/snapshot` (`CreateSandboxSnapshot`; `includeMemory` left to its default,
/// false: memory snapshots are Windows-only).
#[derive(Clone, Debug, Serialize)]
pub struct CreateSandboxSnapshot<'a> {
    /// The snapshot's name (the organization's names are unique).
    pub name: &'a str,
}

/// `SnapshotDto`, reduced to what the adapter reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The snapshot's id (a UUID; `DELETE /snapshots/{id}` takes only this).
    pub id: String,
    /// Its name (what `POST /sandbox {snapshot}` takes).
    pub name: String,
    /// `active`, `removing`, `error`, …
    #[serde(default)]
    pub state: Option<String>,
    /// Size in GB.
    #[serde(default)]
    pub size: Option<f64>,
    /// The sandbox it was taken of.
    #[serde(default)]
    pub source_sandbox_id: Option<String>,
    /// The reason for an `error` state.
    #[serde(default)]
    pub error_reason: Option<String>,
}

/// `GET /snapshots` (`PaginatedSnapshots`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPage {
    /// This page's snapshots.
    #[serde(default)]
    pub items: Vec<Snapshot>,
    /// The number of pages.
    #[serde(default)]
    pub total_pages: u32,
}

/// `GET /sandbox/{id}/ports/{port}/preview-url` (`PortPreviewUrl`).
#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortPreviewUrl {
    /// Where the port is reached.
    pub url: String,
    /// What a private sandbox's preview requests present in `X-Daytona-Preview-Token`.
    pub token: String,
}

/// `GET /sandbox/paginated` (`PaginatedSandboxes`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPage {
    /// This page's sandboxes.
    #[serde(default)]
    pub items: Vec<Sandbox>,
    /// The number of pages.
    #[serde(default)]
    pub total_pages: u32,
}

/// `GET /sandbox/{id}/toolbox-proxy-url`.
#[derive(Clone, Debug, Deserialize)]
pub struct ToolboxProxyUrl {
    /// The toolbox base, without the sandbox id.
    pub url: String,
}

/// `GET …/command/{id}/logs` (SDK ≥ 0.167): the raw log and the daemon's split of it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CommandLogs {
    /// The raw log, with line prefixes.
    #[serde(default)]
    pub output: Option<String>,
}

/// `POST /process/execute`.
#[derive(Clone, Debug, Serialize)]
pub struct ExecuteRequest<'a> {
    /// The command text, written to the stdin of the daemon's shell.
    pub command: &'a str,
    /// Variables added to the shell's environment (`envs`; the daemon appends them to its own
    /// environment when there are any).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<&'a str, &'a str>,
    /// Seconds before the daemon kills the command's process group (its default, when absent,
    /// is 360 s on current daemons).
    pub timeout: u64,
}

/// The answer to `POST /process/execute`: stdout and stderr merged into `result`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResponse {
    /// The shell's exit code (`-1` when it was killed or could not start).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The merged output, as text.
    #[serde(default)]
    pub result: Option<String>,
}

/// `POST /process/session`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest<'a> {
    /// The session id (unique per sandbox; `entrypoint` is reserved).
    pub session_id: &'a str,
}

/// `POST /process/pty` (`PTYCreateRequest`, daemon `pty/types.go`). `envs` is never sent: the
/// daemon lists a session's envs to anyone (`GET /process/pty`), and defaults `TERM` to
/// `xterm-256color`.
#[derive(Clone, Debug, Serialize)]
pub struct PtyCreateRequest<'a> {
    /// The session id, the caller's (409 when it exists).
    pub id: &'a str,
    /// The shell's directory; the daemon's work dir when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a str>,
    /// The terminal's size.
    #[serde(flatten)]
    pub size: PtySize,
}

/// A terminal's size, as create and `POST /process/pty/{id}/resize` (`PTYResizeRequest`) spell
/// it: `{"cols","rows"}`, each at most 1000.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// `PTYCreateResponse`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PtyCreateResponse {
    /// The session id.
    pub session_id: String,
}

/// A PTY WebSocket's text message (`attachWebSocket`): `{"type":"control","status":"connected"}`,
/// or `"error"` with `error`.
#[derive(Clone, Debug, Deserialize)]
pub struct PtyControl {
    /// `control`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `connected`, `error`.
    pub status: String,
    /// Why, with `error`.
    #[serde(default)]
    pub error: Option<String>,
}

/// The reason of the close frame `closeClientsWithExitCode` sends every client when the
/// session's process ended (`pty/session.go`): `{"exitCode":N,"exitReason"?}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PtyExit {
    /// Go's `ExitCode()`: -1 for a signal death; 137 when the session was deleted.
    pub exit_code: i32,
}

/// `POST /process/session/{sessionId}/exec`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionExecuteRequest<'a> {
    /// The command text, sourced by the session's shell.
    pub command: &'a str,
    /// `true`: answer 202 at once and keep the command's stdin open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_async: Option<bool>,
}

/// The answer to a session exec: 200 (sync) or 202 (async, `cmdId` only). A synchronous
/// answer also carries the output: `output`, the raw log (with `\x01\x01\x01`/`\x02\x02\x02`
/// line prefixes for SDK >= 0.27), and `stdout`, `stderr` as the daemon split them (SDK >=
/// 0.167); those strings are decoded as they arrive (`exec.rs`, `SYNC_FIELDS`), never parsed
/// here.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionExecuteResponse {
    /// The command id (a UUID).
    pub cmd_id: String,
    /// The exit code; absent for async commands.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// `GET /process/session/{sessionId}/command/{commandId}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCommand {
    /// The command id.
    pub id: String,
    /// The command text.
    #[serde(default)]
    pub command: String,
    /// Absent while the command runs.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// `GET /process/session/{sessionId}`: the session and its commands.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The commands run in the session so far.
    #[serde(default)]
    pub commands: Option<Vec<SessionCommand>>,
}

/// The error envelope of the API (NestJS), the proxy and the daemon:
/// `{statusCode, message, code?, source?, error?, timestamp, path, method?}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorResponse {
    /// The HTTP status repeated.
    #[serde(default)]
    pub status_code: Option<u16>,
    /// A string, or (NestJS validation) an array of strings.
    #[serde(default)]
    pub message: Option<serde_json::Value>,
    /// `NOT_FOUND`, `FILE_NOT_FOUND`, `SESSION_ENDED`, `SANDBOX_NOT_FOUND`, …
    #[serde(default)]
    pub code: Option<String>,
    /// `DAYTONA_API`, `DAYTONA_PROXY`, `DAYTONA_DAEMON`, `DAYTONA_RUNNER`.
    #[serde(default)]
    pub source: Option<String>,
    /// NestJS' reason phrase; some daemon routes put the message here.
    #[serde(default)]
    pub error: Option<String>,
}

impl ErrorResponse {
    /// The message as one string, `message` first, then `error`.
    pub fn text(&self) -> Option<String> {
        match &self.message {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Some(other) if !other.is_null() => Some(other.to_string()),
            _ => self.error.clone(),
        }
    }
}

/// A directory entry (`GET /files?path=`, `GET /files/info?path=`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileInfo {
    /// The base name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Go `FileMode.String()`: `-rw-r--r--`, `drwxr-xr-x`.
    pub mode: String,
    /// Go `time.String()` (deprecated by Daytona in favour of `modifiedAt`).
    #[serde(default)]
    pub mod_time: String,
    /// RFC 3339, newer daemons.
    #[serde(default)]
    pub modified_at: Option<String>,
    /// True for a directory.
    pub is_dir: bool,
    /// Numeric uid, as a string.
    pub owner: String,
    /// Numeric gid, as a string.
    pub group: String,
    /// Four octal digits: `0644`.
    pub permissions: String,
    /// The full path, newer daemons.
    #[serde(default)]
    pub path: Option<String>,
}

/// One hit of `GET /files/find?path=&pattern=` (a literal substring search).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Match {
    /// The file.
    pub file: String,
    /// 1-based line number.
    pub line: u64,
    /// The whole line, without its newline.
    pub content: String,
}

/// `GET /files/search?path=&pattern=` (a glob on base names).
#[derive(Clone, Debug, Deserialize)]
pub struct SearchFilesResponse {
    /// The matching paths, as walked.
    pub files: Vec<String>,
}

/// `POST /files/bulk-download`.
#[derive(Clone, Debug, Serialize)]
pub struct FilesDownloadRequest<'a> {
    /// The paths, in the order the parts come back.
    pub paths: &'a [&'a str],
}

/// `POST /files/bulk-upload` answer.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UploadResponse {
    /// Per-file errors (with a 400).
    #[serde(default)]
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_dto_from_the_research_transcript_parses() {
        let s: Sandbox = serde_json::from_str(
            r#"{"id":"sbx-1","organizationId":"org1","name":"sbx-1","user":"daytona","env":{},"labels":{"code-toolbox-language":"python"},
 "public":false,"networkBlockAll":false,"kvm":false,"target":"us","cpu":1,"gpu":0,"memory":1,"disk":3,
 "state":"started","toolboxProxyUrl":"http://127.0.0.1:18081/toolbox"}"#,
        )
        .unwrap();
        assert_eq!(s.id, "sbx-1");
        assert_eq!(s.state.as_deref(), Some("started"));
        assert_eq!(
            s.toolbox_proxy_url.as_deref(),
            Some("http://127.0.0.1:18081/toolbox")
        );
    }

    #[test]
    fn requests_are_spelled_like_the_sdk() {
        let r = serde_json::to_string(&SessionExecuteRequest {
            command: "echo hi",
            run_async: None,
        })
        .unwrap();
        assert_eq!(r, r#"{"command":"echo hi"}"#);
        let r = serde_json::to_string(&SessionExecuteRequest {
            command: "x",
            run_async: Some(true),
        })
        .unwrap();
        assert_eq!(r, r#"{"command":"x","runAsync":true}"#);
        let r = serde_json::to_string(&CreateSessionRequest { session_id: "s1" }).unwrap();
        assert_eq!(r, r#"{"sessionId":"s1"}"#);
        let r = serde_json::to_string(&CreateSandbox {
            labels: [("code-toolbox-language".into(), "python".into())].into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            r,
            r#"{"env":{},"labels":{"code-toolbox-language":"python"},"volumes":[]}"#
        );
    }

    #[test]
    fn session_responses_of_each_version_parse() {
        // SDK >= 0.167: raw output plus the daemon's split (captured with SDK 0.226.1).
        let r: SessionExecuteResponse = serde_json::from_str(
            "{\"cmdId\":\"c1\",\"output\":\"\\u0001\\u0001\\u0001out\\n\\u0002\\u0002\\u0002bad\\n\",\"stdout\":\"out\\n\",\"stderr\":\"bad\\n\",\"exitCode\":0}",
        )
        .unwrap();
        assert_eq!(r.cmd_id, "c1");
        assert_eq!(r.exit_code, Some(0));
        // Async: cmdId only.
        let r: SessionExecuteResponse = serde_json::from_str(r#"{"cmdId":"c2"}"#).unwrap();
        assert!(r.exit_code.is_none());
        let c: SessionCommand = serde_json::from_str(r#"{"id":"c2","command":"sleep 1"}"#).unwrap();
        assert!(c.exit_code.is_none());
    }

    #[test]
    fn error_envelopes_parse_with_string_or_array_messages() {
        let e: ErrorResponse = serde_json::from_str(
            r#"{"statusCode":404,"message":"not found: session not found","code":"NOT_FOUND","timestamp":"2024-01-01T12:00:00Z","path":"/process/session/x","method":"GET"}"#,
        )
        .unwrap();
        assert_eq!(e.status_code, Some(404));
        assert_eq!(e.code.as_deref(), Some("NOT_FOUND"));
        assert_eq!(e.text().unwrap(), "not found: session not found");
        let e: ErrorResponse = serde_json::from_str(
            r#"{"statusCode":400,"message":["cpu must be a number","memory too big"],"error":"Bad Request"}"#,
        )
        .unwrap();
        assert_eq!(e.text().unwrap(), "cpu must be a number; memory too big");
        let e: ErrorResponse = serde_json::from_str(
            r#"{"error":"request body must be {\"paths\": [ ... ]} and non-empty"}"#,
        )
        .unwrap();
        assert!(e.text().unwrap().starts_with("request body"));
    }

    #[test]
    fn file_info_parses_the_daemon_shape() {
        let f: FileInfo = serde_json::from_str(
            r#"{"name":"a.txt","size":3,"mode":"-rw-r--r--","modTime":"2024-01-01 00:00:00 +0000 UTC","modifiedAt":"2024-01-01T00:00:00Z",
 "isDir":false,"owner":"1000","group":"1000","permissions":"0644","path":"/tmp/a.txt"}"#,
        )
        .unwrap();
        assert_eq!(f.permissions, "0644");
        assert!(!f.is_dir);
    }
}
