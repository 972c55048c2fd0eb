//! The exec WebSocket's frames: one JSON object per text frame, as both official clients speak
//! them (`northflank` 2.1.0 `_protocols/__init__.py`, `@northflank/js-client` 0.9.5
//! `ExecCommandStandard`).

use serde::Serialize;
use serde_json::{Value, json};

/// What the `init` frame's `context` asks for.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecContext<'a> {
    /// The argv (with `shell: "none"`) or a string for `shell`.
    pub command: &'a [String],
    /// `"none"`: exec'd directly.
    pub shell: &'a str,
    /// `"base64"`: stdin and output are base64, byte-exact.
    pub encoding: &'a str,
    /// No pseudo-terminal: stdout and stderr stay apart.
    pub tty: bool,
    /// The instance (pod) to run in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_name: Option<&'a str>,
    /// The container to run in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_name: Option<&'a str>,
    /// The user (name or uid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    /// The group (name or gid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<&'a str>,
}

/// `{"type":"init","data":{"auth":{"type":"apiToken","apiToken"},"context"}}`: the token travels
/// in the first frame, never in a header.
pub fn init_frame(token: &str, context: &ExecContext<'_>) -> String {
    json!({
        "type": "init",
        "data": {"auth": {"type": "apiToken", "apiToken": token}, "context": context},
    })
    .to_string()
}

/// `{"type":"payload","data":"<base64>"}`: a stdin chunk.
pub fn payload_frame(base64: &str) -> String {
    json!({"type": "payload", "data": base64}).to_string()
}

/// `{"type":"stdInEnd"}`: the end of stdin.
pub const STDIN_END: &str = r#"{"type":"stdInEnd"}"#;

/// A frame from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerFrame {
    /// `init` with `auth: "successful"`.
    Ready,
    /// `init` with anything else: the handshake failed.
    AuthFailed(String),
    /// `stdOut` data (base64 with `encoding: base64`).
    Stdout(String),
    /// `stdErr` data.
    Stderr(String),
    /// `completion {exitCode, status, message}`.
    Completion {
        /// `exitCode`: a number, or a numeric string (the proxy sends `"42"` in practice).
        exit_code: Option<i32>,
        /// `Success`, `Failure` or `Unknown`.
        status: String,
        /// `message`, if any.
        message: String,
    },
    /// `error {message}`.
    Error(String),
}

/// `exitCode` as both clients accept it: a number or a string of digits.
pub fn exit_code(v: &Value) -> Option<i32> {
    match v {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Parses one frame. Malformed JSON, a non-object, or an unknown type is an `Err` (both clients
/// treat them as protocol errors).
pub fn parse_frame(raw: &[u8]) -> Result<ServerFrame, String> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| {
        format!(
            "malformed frame ({e}): {:?}",
            String::from_utf8_lossy(&raw[..raw.len().min(120)])
        )
    })?;
    let Value::Object(m) = &v else {
        return Err(format!("a frame that is not an object: {v}"));
    };
    let data = m.get("data").unwrap_or(&Value::Null);
    let text = |d: &Value| d.as_str().map(str::to_owned);
    match m.get("type").and_then(Value::as_str) {
        Some("init") => match data.get("auth").and_then(Value::as_str) {
            Some("successful") => Ok(ServerFrame::Ready),
            other => Ok(ServerFrame::AuthFailed(format!(
                "auth {}: {}",
                other.unwrap_or("missing"),
                data.get("message").and_then(Value::as_str).unwrap_or("")
            ))),
        },
        Some("stdOut") => text(data)
            .map(ServerFrame::Stdout)
            .ok_or_else(|| "stdOut data is not a string".into()),
        Some("stdErr") => text(data)
            .map(ServerFrame::Stderr)
            .ok_or_else(|| "stdErr data is not a string".into()),
        Some("completion") if data.is_object() => Ok(ServerFrame::Completion {
            exit_code: data.get("exitCode").and_then(exit_code),
            status: data
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            message: data
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        }),
        Some("error") => Ok(ServerFrame::Error(
            data.get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| data.to_string()),
        )),
        other => Err(format!("unknown frame type {other:?}: {v}")),
    }
}

/// `/v1/command-exec/[teams/{t}/]projects/{p}/{services|jobs}/{id}` (the team scope nests
/// inside `command-exec`; `/v1/teams/…/command-exec` is a 404).
pub fn exec_path(team: Option<&str>, project: &str, segment: &str, id: &str) -> String {
    let esc = execseam_adapter_kit::text::escape_path_segment;
    let team = team
        .map(|t| format!("teams/{}/", esc(t)))
        .unwrap_or_default();
    format!(
        "/v1/command-exec/{team}projects/{}/{segment}/{}",
        esc(project),
        esc(id)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_as_the_clients_parse_them() {
        assert_eq!(
            parse_frame(br#"{"type":"init","data":{"auth":"successful","context":{}}}"#).unwrap(),
            ServerFrame::Ready
        );
        assert!(matches!(
            parse_frame(br#"{"type":"init","data":{"auth":"failed","message":"bad token"}}"#).unwrap(),
            ServerFrame::AuthFailed(m) if m.contains("bad token")
        ));
        assert_eq!(
            parse_frame(br#"{"type":"stdOut","data":"aGk="}"#).unwrap(),
            ServerFrame::Stdout("aGk=".into())
        );
        for (raw, want) in [
            (
                r#"{"type":"completion","data":{"exitCode":"42","status":"Failure"}}"#,
                Some(42),
            ),
            (
                r#"{"type":"completion","data":{"exitCode":0,"status":"Success"}}"#,
                Some(0),
            ),
            (r#"{"type":"completion","data":{"status":"Unknown"}}"#, None),
            (
                r#"{"type":"completion","data":{"exitCode":"x","status":"Failure"}}"#,
                None,
            ),
        ] {
            match parse_frame(raw.as_bytes()).unwrap() {
                ServerFrame::Completion { exit_code, .. } => assert_eq!(exit_code, want, "{raw}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(parse_frame(b"{\"type\":\"stdOut\",\"data\":").is_err());
        assert!(parse_frame(br#"{"type":"surprise"}"#).is_err());
        assert!(parse_frame(b"[1]").is_err());
    }

    #[test]
    fn the_init_frame_carries_the_token_and_omits_unset_fields() {
        let argv = vec!["ls".to_owned(), "-la".to_owned()];
        let ctx = ExecContext {
            command: &argv,
            shell: "none",
            encoding: "base64",
            tty: false,
            instance_name: None,
            container_name: None,
            user: Some("root"),
            group: None,
        };
        let v: Value = serde_json::from_str(&init_frame("tok", &ctx)).unwrap();
        assert_eq!(
            v["data"]["auth"],
            json!({"type": "apiToken", "apiToken": "tok"})
        );
        assert_eq!(
            v["data"]["context"],
            json!({"command": ["ls", "-la"], "shell": "none", "encoding": "base64", "tty": false, "user": "root"})
        );
        assert_eq!(
            exec_path(Some("t 1"), "p", "services", "s"),
            "/v1/command-exec/teams/t%201/projects/p/services/s"
        );
        assert_eq!(
            exec_path(None, "p", "jobs", "j"),
            "/v1/command-exec/projects/p/jobs/j"
        );
    }
}
