//! E2B's wire format: the control plane's REST JSON (camelCase, `templateID`/`sandboxID`) and
//! envd's `process.proto` / `filesystem.proto` messages in proto3 JSON (lowerCamelCase names,
//! defaults omitted, int64 as strings, bytes as standard base64, enums as names).
//!
//! Decoding is lenient the way protojson is: missing fields take their defaults, unknown fields
//! are ignored, snake_case names are accepted, integers may be numbers or strings, enums names or
//! numbers.

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

// ------------------------------------------------------------------------------------------------
// Control plane (`https://api.<domain>`, header `X-API-KEY`).

/// `POST /v2/sandboxes` (`NewSandboxV2`) and `POST /sandboxes` (`NewSandbox`, with `secure`).
#[derive(Serialize, Debug)]
pub struct NewSandbox<'a> {
    /// The template.
    #[serde(rename = "templateID")]
    pub template_id: &'a str,
    /// Lifetime in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Metadata.
    pub metadata: &'a BTreeMap<String, String>,
    /// Sandbox-wide environment variables (envd's `/init` env).
    #[serde(rename = "envVars")]
    pub env_vars: &'a BTreeMap<String, String>,
    /// Legacy route only: older SDKs send `true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
}

/// `POST /v2/sandboxes/{id}/connect` (and the legacy `/sandboxes/{id}/connect`).
#[derive(Serialize, Debug)]
pub struct ConnectSandbox {
    /// New lifetime in seconds from now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/pause` (`SandboxPauseRequest`): `memory: false` is a filesystem-only
/// pause; omitted, E2B keeps the memory.
#[derive(Serialize, Debug)]
pub struct PauseSandbox {
    /// Keep memory and processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/snapshots` (`SandboxSnapshotRequest`).
#[derive(Serialize, Debug)]
pub struct SnapshotSandbox<'a> {
    /// A name: the snapshot becomes `<team>/<name>:default`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
}

/// `SnapshotInfo`: the answer of a snapshot and one entry of `GET /snapshots`.
#[derive(Deserialize, Debug, Clone)]
pub struct SnapshotInfo {
    /// What `templateID` takes to start from it, and `DELETE /templates/{id}` deletes.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Its names (`<team>/<name>`).
    #[serde(default)]
    pub names: Vec<String>,
}

/// `POST /sandboxes/{id}/fork` (`SandboxForkRequest`).
#[derive(Serialize, Debug)]
pub struct ForkSandbox {
    /// Each fork's lifetime in seconds (E2B's default is 15).
    pub timeout: u64,
    /// How many forks.
    pub count: u32,
}

/// One entry of a fork's answer (`SandboxForkResult`): a sandbox or an error.
#[derive(Deserialize, Debug, Clone)]
pub struct ForkResult {
    /// The fork.
    #[serde(default)]
    pub sandbox: Option<Sandbox>,
    /// Why this fork failed.
    #[serde(default)]
    pub error: Option<ApiError>,
}

/// The control plane's `Error {code, message}`.
#[derive(Deserialize, Debug, Clone)]
pub struct ApiError {
    /// An HTTP status.
    #[serde(default)]
    pub code: u16,
    /// What went wrong.
    #[serde(default)]
    pub message: String,
}

/// The `Sandbox` answer of create and connect.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The template.
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    /// The sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The envd version (gates SDK features).
    #[serde(rename = "envdVersion")]
    pub envd_version: String,
    /// The token envd requires in `X-Access-Token` (secure sandboxes; always with v2).
    #[serde(rename = "envdAccessToken", default)]
    pub envd_access_token: Option<String>,
    /// The sandbox domain; `null` means the client's configured domain.
    #[serde(default)]
    pub domain: Option<String>,
}

/// One entry of `GET /v2/sandboxes` (`ListedSandbox`; unknown fields ignored).
#[derive(Deserialize, Debug, Clone)]
pub struct ListedSandbox {
    /// The sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The template.
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    /// `running` or `paused`.
    #[serde(default)]
    pub state: String,
    /// Metadata.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

// ------------------------------------------------------------------------------------------------
// envd: process.Process

/// `process.ProcessConfig`.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ProcessConfig {
    /// The program.
    pub cmd: String,
    /// Its arguments (argv[1..]).
    pub args: Vec<String>,
    /// Environment variables added on top of envd's base environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// The working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `process.StartRequest`.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct StartRequest {
    /// What to run.
    pub process: ProcessConfig,
    /// A tag, so the process can be signalled before its pid is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Whether to open a stdin pipe (envd defaults to true when absent).
    pub stdin: bool,
}

/// `process.ProcessSelector` (a oneof).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ProcessSelector {
    /// By pid.
    Pid(u32),
    /// By tag.
    Tag(String),
}

/// `process.ProcessInput` (a oneof; only stdin is used).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ProcessInput {
    /// Base64 bytes.
    pub stdin: String,
}

/// `process.SendInputRequest`.
#[derive(Serialize, Debug)]
pub struct SendInputRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// The bytes.
    pub input: ProcessInput,
}

/// `process.StreamInputRequest` (a oneof of start/data/keepalive).
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub enum StreamInputRequest {
    /// First message: which process.
    Start {
        /// The selector.
        process: ProcessSelector,
    },
    /// Then the input.
    Data {
        /// The bytes.
        input: ProcessInput,
    },
}

/// `process.ListResponse` (only what the kill needs).
#[derive(Deserialize, Debug, Default)]
pub struct ListResponse {
    /// The processes envd tracks.
    #[serde(default)]
    pub processes: Vec<ProcessInfo>,
}

/// `process.ProcessInfo` (only what the kill needs).
#[derive(Deserialize, Debug)]
pub struct ProcessInfo {
    /// Its pid.
    #[serde(default)]
    pub pid: u32,
    /// Its tag, if it has one.
    #[serde(default)]
    pub tag: Option<String>,
}

/// `process.SendSignalRequest`.
#[derive(Serialize, Debug)]
pub struct SendSignalRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// `SIGNAL_SIGKILL` or `SIGNAL_SIGTERM`.
    pub signal: &'static str,
}

/// `process.CloseStdinRequest` and `process.ConnectRequest` (both only name the process).
#[derive(Serialize, Debug)]
pub struct ProcessRequest {
    /// Which process.
    pub process: ProcessSelector,
}

/// An empty response (`SendInputResponse`, `CloseStdinResponse`, …): any object.
#[derive(Deserialize, Debug, Default)]
pub struct Empty {}

/// `process.StartResponse` / `ConnectResponse`.
#[derive(Deserialize, Debug, Default, PartialEq, Eq)]
pub struct StartResponse {
    /// The event (absent only in a malformed message).
    #[serde(default)]
    pub event: Option<ProcessEvent>,
}

/// `process.ProcessEvent`: a oneof of start, data, end, keepalive.
#[derive(Deserialize, Debug, Default, PartialEq, Eq)]
pub struct ProcessEvent {
    /// The process started.
    #[serde(default)]
    pub start: Option<StartEvent>,
    /// A chunk of output.
    #[serde(default)]
    pub data: Option<DataEvent>,
    /// The process ended.
    #[serde(default)]
    pub end: Option<EndEvent>,
    /// Nothing happened for a while.
    #[serde(default)]
    pub keepalive: Option<serde_json::Value>,
}

/// `ProcessEvent.StartEvent`.
#[derive(Deserialize, Debug, Default, PartialEq, Eq)]
pub struct StartEvent {
    /// The pid (`uint32`).
    #[serde(default, deserialize_with = "lenient_u32")]
    pub pid: u32,
}

/// `ProcessEvent.DataEvent`: a oneof of base64 stdout, stderr, pty bytes.
#[derive(Deserialize, Debug, Default, PartialEq, Eq)]
pub struct DataEvent {
    /// stdout bytes (base64).
    #[serde(default)]
    pub stdout: Option<String>,
    /// stderr bytes (base64).
    #[serde(default)]
    pub stderr: Option<String>,
    /// pty bytes (base64).
    #[serde(default)]
    pub pty: Option<String>,
}

/// `ProcessEvent.EndEvent`. Proto3 JSON omits defaults: `exitCode` is absent for 0 and `exited`
/// for false.
#[derive(Deserialize, Debug, Default, PartialEq, Eq, Clone)]
pub struct EndEvent {
    /// `sint32 exit_code`: the code, or -1 when killed by a signal.
    #[serde(
        default,
        rename = "exitCode",
        alias = "exit_code",
        deserialize_with = "lenient_i32"
    )]
    pub exit_code: i32,
    /// True when the process exited (rather than being killed).
    #[serde(default)]
    pub exited: bool,
    /// Go's `ProcessState.String()`: `exit status 3`, `signal: killed`.
    #[serde(default)]
    pub status: String,
    /// `cmd.Wait()`'s error text, if any.
    #[serde(default)]
    pub error: Option<String>,
}

// ------------------------------------------------------------------------------------------------
// envd: filesystem.Filesystem

/// `filesystem.ListDirRequest`.
#[derive(Serialize, Debug)]
pub struct ListDirRequest<'a> {
    /// The directory.
    pub path: &'a str,
    /// How deep (0 means 1 to envd).
    pub depth: u32,
}

/// `filesystem.ListDirResponse`.
#[derive(Deserialize, Debug, Default)]
pub struct ListDirResponse {
    /// The entries (absent when empty).
    #[serde(default)]
    pub entries: Vec<EntryInfo>,
}

/// `filesystem.StatRequest`.
#[derive(Serialize, Debug)]
pub struct StatRequest<'a> {
    /// The path.
    pub path: &'a str,
}

/// `filesystem.StatResponse`.
#[derive(Deserialize, Debug, Default)]
pub struct StatResponse {
    /// The entry.
    #[serde(default)]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.FileType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum FileType {
    /// `FILE_TYPE_UNSPECIFIED` (or anything unknown).
    #[default]
    Unspecified,
    /// `FILE_TYPE_FILE`.
    File,
    /// `FILE_TYPE_DIRECTORY`.
    Directory,
    /// `FILE_TYPE_SYMLINK`.
    Symlink,
}

impl<'de> Deserialize<'de> for FileType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(match &v {
            serde_json::Value::String(s) => match s.as_str() {
                "FILE_TYPE_FILE" => FileType::File,
                "FILE_TYPE_DIRECTORY" => FileType::Directory,
                "FILE_TYPE_SYMLINK" => FileType::Symlink,
                _ => FileType::Unspecified,
            },
            serde_json::Value::Number(n) => match n.as_u64() {
                Some(1) => FileType::File,
                Some(2) => FileType::Directory,
                Some(3) => FileType::Symlink,
                _ => FileType::Unspecified,
            },
            serde_json::Value::Null => FileType::Unspecified,
            other => return Err(D::Error::custom(format!("bad FileType {other}"))),
        })
    }
}

/// `filesystem.EntryInfo`.
#[derive(Deserialize, Debug, Default, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    /// The base name.
    #[serde(default)]
    pub name: String,
    /// The type (envd ≤ 0.6: SYMLINK for links; newer: the target's type plus `isSymlink`).
    #[serde(default, rename = "type")]
    pub file_type: FileType,
    /// The path, under the directory as requested.
    #[serde(default)]
    pub path: String,
    /// Size in bytes (`int64`, a JSON string).
    #[serde(default, deserialize_with = "lenient_i64")]
    pub size: i64,
    /// Permission bits.
    #[serde(default, deserialize_with = "lenient_u32")]
    pub mode: u32,
    /// Go's `FileMode.String()`.
    #[serde(default)]
    pub permissions: String,
    /// Owner name.
    #[serde(default)]
    pub owner: String,
    /// Group name.
    #[serde(default)]
    pub group: String,
    /// RFC 3339 modification time.
    #[serde(default, alias = "modified_time")]
    pub modified_time: Option<String>,
    /// A symlink's target.
    #[serde(default, alias = "symlink_target")]
    pub symlink_target: Option<String>,
    /// Newer envd: the entry is a symlink (its `type` is the target's).
    #[serde(default, alias = "is_symlink")]
    pub is_symlink: bool,
}

/// One entry of `POST /files`'s answer.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct WriteInfo {
    /// The path written.
    pub path: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `"file"`.
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
}

// ------------------------------------------------------------------------------------------------
// Lenient scalars (protojson accepts numbers and strings for every integer type).

fn lenient_int<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| D::Error::custom(format!("{n} is not an integer"))),
        serde_json::Value::String(s) => s
            .parse()
            .map_err(|_| D::Error::custom(format!("{s:?} is not an integer"))),
        serde_json::Value::Null => Ok(0),
        other => Err(D::Error::custom(format!("{other} is not an integer"))),
    }
}

fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    lenient_int(d)
}

fn lenient_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = lenient_int(d)?;
    i32::try_from(v).map_err(|_| D::Error::custom(format!("{v} does not fit an int32")))
}

fn lenient_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = lenient_int(d)?;
    u32::try_from(v).map_err(|_| D::Error::custom(format!("{v} does not fit a uint32")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_request_matches_the_sdk_shape() {
        let req = StartRequest {
            process: ProcessConfig {
                cmd: "printf".into(),
                args: vec!["%s".into(), "a b".into()],
                envs: BTreeMap::new(),
                cwd: None,
            },
            tag: None,
            stdin: false,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"process":{"cmd":"printf","args":["%s","a b"]},"stdin":false}"#
        );
        let req = StartRequest {
            process: ProcessConfig {
                cmd: "pwd".into(),
                args: vec![],
                envs: [("A".to_string(), "1".to_string())].into(),
                cwd: Some("/home/user".into()),
            },
            tag: Some("execseam-1".into()),
            stdin: true,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"process":{"cmd":"pwd","args":[],"envs":{"A":"1"},"cwd":"/home/user"},"tag":"execseam-1","stdin":true}"#
        );
    }

    #[test]
    fn selectors_signals_and_input_match_the_sdk() {
        // Captured from the SDK: {"process":{"pid":42},"signal":"SIGNAL_SIGKILL"}
        let s = SendSignalRequest {
            process: ProcessSelector::Pid(42),
            signal: "SIGNAL_SIGKILL",
        };
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"process":{"pid":42},"signal":"SIGNAL_SIGKILL"}"#
        );
        let i = SendInputRequest {
            process: ProcessSelector::Pid(42),
            input: ProcessInput {
                stdin: "aGVsbG8K".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&i).unwrap(),
            r#"{"process":{"pid":42},"input":{"stdin":"aGVsbG8K"}}"#
        );
        let t = ProcessRequest {
            process: ProcessSelector::Tag("t".into()),
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"process":{"tag":"t"}}"#
        );
        let start = StreamInputRequest::Start {
            process: ProcessSelector::Pid(7),
        };
        assert_eq!(
            serde_json::to_string(&start).unwrap(),
            r#"{"start":{"process":{"pid":7}}}"#
        );
        let data = StreamInputRequest::Data {
            input: ProcessInput {
                stdin: "eA==".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&data).unwrap(),
            r#"{"data":{"input":{"stdin":"eA=="}}}"#
        );
    }

    #[test]
    fn events_decode_with_defaults_omitted() {
        let e: StartResponse =
            serde_json::from_str(r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#)
                .unwrap();
        let end = e.event.unwrap().end.unwrap();
        assert_eq!((end.exit_code, end.exited), (0, true));
        assert_eq!(end.error, None);
        let e: StartResponse = serde_json::from_str(
            r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}"#,
        )
        .unwrap();
        let end = e.event.unwrap().end.unwrap();
        assert_eq!((end.exit_code, end.exited), (-1, false));
        // snake_case and string integers, unknown fields.
        let e: StartResponse = serde_json::from_str(
            r#"{"event":{"end":{"exit_code":"3","exited":true,"future":1}},"x":2}"#,
        )
        .unwrap();
        assert_eq!(e.event.unwrap().end.unwrap().exit_code, 3);
        let e: StartResponse =
            serde_json::from_str(r#"{"event":{"start":{"pid":"412"}}}"#).unwrap();
        assert_eq!(e.event.unwrap().start.unwrap().pid, 412);
        let e: StartResponse = serde_json::from_str(r#"{"event":{"keepalive":{}}}"#).unwrap();
        assert!(e.event.unwrap().keepalive.is_some());
    }

    #[test]
    fn entries_decode_int64_strings_and_enum_names_or_numbers() {
        let r: ListDirResponse = serde_json::from_str(
            r#"{"entries":[{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"12","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2024-01-01T00:00:00Z"},{"name":"d","type":2,"path":"/home/user/d"},{"name":"l","type":"FILE_TYPE_SYMLINK","path":"/home/user/l","symlinkTarget":"/home/user/a.txt"}]}"#,
        )
        .unwrap();
        assert_eq!(r.entries.len(), 3);
        assert_eq!(r.entries[0].size, 12);
        assert_eq!(r.entries[0].file_type, FileType::File);
        assert_eq!(r.entries[1].file_type, FileType::Directory);
        assert_eq!(r.entries[1].size, 0);
        assert_eq!(r.entries[2].file_type, FileType::Symlink);
        let empty: ListDirResponse = serde_json::from_str("{}").unwrap();
        assert!(empty.entries.is_empty());
    }

    #[test]
    fn the_control_plane_bodies_match_the_sdk() {
        let none = BTreeMap::new();
        let body = NewSandbox {
            template_id: "base",
            timeout: None,
            metadata: &none,
            env_vars: &none,
            secure: None,
        };
        // Captured from SDK 2.63.0's Sandbox.create().
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"templateID":"base","metadata":{},"envVars":{}}"#
        );
        let s: Sandbox = serde_json::from_str(
            r#"{"templateID":"base","sandboxID":"sbx123","clientID":"x","envdVersion":"0.6.13","envdAccessToken":"tok-abc","domain":null,"alias":"a"}"#,
        )
        .unwrap();
        assert_eq!(s.sandbox_id, "sbx123");
        assert_eq!(s.envd_access_token.as_deref(), Some("tok-abc"));
        assert_eq!(s.domain, None);
    }
}
