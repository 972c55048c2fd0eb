//! The Sprites exec protocol, named as the API and the official SDKs spell it.
//!
//! Sources: sprites-go `websocket.go` (`StreamID`), `exec.go` (`buildWebSocketURL`),
//! sprites-py 0.7.2 `websocket.py`, the 2025 in-VM server (`pkg/runner/multiplexer.go`:
//! `WriteExit` clamps the code to one byte), and the published exec reference (`session_info`,
//! `exit` messages).

use std::collections::BTreeMap;

use bytes::Bytes;
use execseam_core::Command;
use serde::Deserialize;
use serde_json::Value;

/// Client → server: `[0x00, stdin…]`.
pub const STDIN: u8 = 0x00;
/// Server → client: `[0x01, stdout…]`.
pub const STDOUT: u8 = 0x01;
/// Server → client: `[0x02, stderr…]`.
pub const STDERR: u8 = 0x02;
/// Server → client: `[0x03, code]` (two bytes).
pub const EXIT: u8 = 0x03;
/// Client → server: exactly `[0x04]`, stdin EOF.
pub const STDIN_EOF: u8 = 0x04;

/// A server frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Bytes of stdout.
    Stdout(Bytes),
    /// Bytes of stderr.
    Stderr(Bytes),
    /// The exit code.
    Exit(i32),
}

/// Decodes a binary message of the non-TTY protocol. An empty message is nothing (`Ok(None)`,
/// as the SDKs skip it); an unknown stream id or an exit frame whose payload is neither one byte
/// (every server) nor four (u32 big-endian, what the Elixir SDK expects) is an error: output is
/// never silently dropped and an exit code is never guessed.
pub fn parse_binary(data: &[u8]) -> Result<Option<Frame>, String> {
    let Some((&id, payload)) = data.split_first() else {
        return Ok(None);
    };
    match id {
        STDOUT => Ok(Some(Frame::Stdout(Bytes::copy_from_slice(payload)))),
        STDERR => Ok(Some(Frame::Stderr(Bytes::copy_from_slice(payload)))),
        EXIT => match payload {
            [code] => Ok(Some(Frame::Exit(i32::from(*code)))),
            [a, b, c, d] => i32::try_from(u32::from_be_bytes([*a, *b, *c, *d]))
                .map(|c| Some(Frame::Exit(c)))
                .map_err(|_| format!("exit frame with an out-of-range code {payload:?}")),
            _ => Err(format!(
                "exit frame with a {}-byte payload (want one byte, the code)",
                payload.len()
            )),
        },
        other => Err(format!("binary frame with unknown stream id 0x{other:02x}")),
    }
}

/// A text message from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    /// `session_info`: the session id (an integer in the docs, a string in some SDK types).
    SessionInfo {
        /// The id, as a string.
        session_id: Option<String>,
    },
    /// `{"type":"exit","exit_code":N}`.
    Exit(i64),
    /// Anything else (`port_opened`, `port_closed`, …) or not JSON.
    Other,
}

#[derive(Deserialize)]
struct TextMessage {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    session_id: Option<Value>,
    #[serde(default)]
    exit_code: Option<i64>,
}

/// Decodes a text message.
pub fn parse_text(text: &str) -> Text {
    let Ok(m) = serde_json::from_str::<TextMessage>(text) else {
        return Text::Other;
    };
    match m.kind.as_str() {
        "session_info" => Text::SessionInfo {
            session_id: m.session_id.and_then(|v| match v {
                Value::String(s) => Some(s),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }),
        },
        "exit" => match m.exit_code {
            Some(c) => Text::Exit(c),
            None => Text::Other,
        },
        _ => Text::Other,
    }
}

/// The query of a new exec: `cmd` per argv element, `path` = argv[0] (as every SDK sends),
/// `dir`, `env` per variable, `stdin`.
pub fn exec_query(
    cmd: &Command,
    env: Option<&BTreeMap<String, String>>,
    stdin: bool,
) -> Vec<(String, String)> {
    let mut q: Vec<(String, String)> = cmd
        .argv()
        .iter()
        .map(|a| ("cmd".to_owned(), a.clone()))
        .collect();
    q.push(("path".to_owned(), cmd.program().to_owned()));
    if let Some(dir) = cmd.workdir() {
        q.push(("dir".to_owned(), dir.to_owned()));
    }
    if let Some(env) = env {
        q.extend(
            env.iter()
                .map(|(k, v)| ("env".to_owned(), format!("{k}={v}"))),
        );
    }
    q.push(("stdin".to_owned(), stdin.to_string()));
    q
}

/// How long a terminal's command outlives a lost socket (`max_run_after_disconnect`, a Go
/// duration; the server's TTY default, `0`, is forever): nobody can reach it again through this
/// client, so it ends as an abandoned non-TTY command does (that default is 10 s).
pub const TTY_MAX_RUN_AFTER_DISCONNECT: &str = "10s";

/// What a TTY exec adds to [`exec_query`]: `tty=true`, the size (`rows`, `cols`, as sprites-py
/// sends them) and [`TTY_MAX_RUN_AFTER_DISCONNECT`].
pub fn tty_query(rows: u16, cols: u16) -> [(String, String); 4] {
    [
        ("tty".to_owned(), "true".to_owned()),
        ("rows".to_owned(), rows.to_string()),
        ("cols".to_owned(), cols.to_string()),
        (
            "max_run_after_disconnect".to_owned(),
            TTY_MAX_RUN_AFTER_DISCONNECT.to_owned(),
        ),
    ]
}

/// A TTY resize message: `{"type":"resize","cols":C,"rows":R}` (sprites-go `Resize`, the API's
/// ResizeMessage).
pub fn resize_message(rows: u16, cols: u16) -> String {
    format!(r#"{{"type":"resize","cols":{cols},"rows":{rows}}}"#)
}

/// The Sprites API error body: `{"error": code-or-text, "message": …, "retry_after_seconds": …}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ApiError {
    /// A machine code (`sprite_creation_rate_limited`) or the text (`authentication failed`).
    #[serde(default)]
    pub error: Option<String>,
    /// The human message.
    #[serde(default)]
    pub message: Option<String>,
    /// For 429s.
    #[serde(default)]
    pub retry_after_seconds: Option<u64>,
}

/// One entry of `GET /fs/list`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct FsEntry {
    /// The absolute path.
    #[serde(default)]
    pub path: String,
    /// A directory.
    #[serde(default, rename = "isDir")]
    pub is_dir: bool,
}

/// `GET /fs/list`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct FsList {
    /// The entries (for a file: the file itself).
    #[serde(default)]
    pub entries: Vec<FsEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_decode_as_the_sdks_read_them() {
        assert_eq!(
            parse_binary(b"\x01hello\n").unwrap(),
            Some(Frame::Stdout(Bytes::from_static(b"hello\n")))
        );
        assert_eq!(
            parse_binary(b"\x02err\n").unwrap(),
            Some(Frame::Stderr(Bytes::from_static(b"err\n")))
        );
        assert_eq!(parse_binary(&[3, 0]).unwrap(), Some(Frame::Exit(0)));
        assert_eq!(parse_binary(&[3, 255]).unwrap(), Some(Frame::Exit(255)));
        assert_eq!(
            parse_binary(&[3, 0, 0, 0, 42]).unwrap(),
            Some(Frame::Exit(42))
        );
        assert_eq!(parse_binary(&[]).unwrap(), None);
        assert!(
            parse_binary(&[3]).is_err(),
            "an exit without its code is not exit 0"
        );
        assert!(parse_binary(&[3, 1, 2]).is_err());
        assert!(parse_binary(&[7, 1]).is_err());
    }

    #[test]
    fn text_messages() {
        assert_eq!(
            parse_text(
                r#"{"cols":120,"command":"bash","created":1767609000,"is_owner":true,"rows":40,"session_id":1847,"tty":true,"type":"session_info"}"#
            ),
            Text::SessionInfo {
                session_id: Some("1847".into())
            }
        );
        assert_eq!(
            parse_text(r#"{"type":"session_info","session_id":"abc"}"#),
            Text::SessionInfo {
                session_id: Some("abc".into())
            }
        );
        assert_eq!(
            parse_text(r#"{"type":"exit","exit_code":3}"#),
            Text::Exit(3)
        );
        assert_eq!(
            parse_text(r#"{"type":"port_opened","port":8080}"#),
            Text::Other
        );
        assert_eq!(parse_text("not json"), Text::Other);
    }

    #[test]
    fn the_query_is_what_the_sdks_send() {
        let c = Command::builder(["sh", "-c", "echo $A"])
            .workdir("/home/sprite/x")
            .build()
            .unwrap();
        let env: BTreeMap<String, String> = [("A".to_string(), "1 2".to_string())].into();
        let q = exec_query(&c, Some(&env), false);
        let want: Vec<(String, String)> = [
            ("cmd", "sh"),
            ("cmd", "-c"),
            ("cmd", "echo $A"),
            ("path", "sh"),
            ("dir", "/home/sprite/x"),
            ("env", "A=1 2"),
            ("stdin", "false"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(q, want);
    }
}

/// `GET /v1/sprites`: a page of sprites.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SpriteList {
    /// The sprites.
    #[serde(default)]
    pub sprites: Vec<SpriteInfo>,
    /// More pages follow.
    #[serde(default)]
    pub has_more: bool,
    /// The token for the next page.
    #[serde(default)]
    pub next_continuation_token: Option<String>,
}

/// One sprite of a list.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SpriteInfo {
    /// Its name (what the API's paths take).
    #[serde(default)]
    pub name: String,
    /// Its status (`running`, `warm`, `cold`, …).
    #[serde(default)]
    pub status: Option<String>,
    /// Its URL, which routes HTTP to it (`https://{name}-{suffix}.sprites.app`).
    #[serde(default)]
    pub url: Option<String>,
    /// Who may use the URL.
    #[serde(default)]
    pub url_settings: Option<UrlSettings>,
}

/// One service of `GET /v1/sprites/{name}/services` (sprites-go `types.go` `ServiceWithState`:
/// the definition and its runtime state).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ServiceWithState {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// The port the sprite's URL routes to while it runs ("HTTP port for proxy routing").
    #[serde(default)]
    pub http_port: Option<u16>,
    /// Its runtime state.
    #[serde(default)]
    pub state: Option<ServiceState>,
}

/// `ServiceState` (sprites-go `types.go`): `status` is `stopped`, `starting`, `running`,
/// `stopping` or `failed`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ServiceState {
    /// Its status.
    #[serde(default)]
    pub status: Option<String>,
}

/// `url_settings` (sprites-go `types.go` `URLSettings`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UrlSettings {
    /// `sprite` (a Sprites token is required, the default) or `public`.
    #[serde(default)]
    pub auth: Option<String>,
}

/// One checkpoint (`Checkpoint` in sprites-go `types.go`; `create_time`, `history` and
/// `is_auto` not read).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CheckpointInfo {
    /// Its versioned id (`v1`, …).
    pub id: String,
    /// The comment it was taken with.
    #[serde(default)]
    pub comment: String,
}

/// The first `{"type":"error"}` line of an NDJSON answer (`StreamMessage` in sprites-py
/// `checkpoint.py`: `{type, data, error}`), or why the answer is not NDJSON.
pub(crate) fn stream_error(body: &[u8]) -> Option<String> {
    for line in body
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
    {
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v["type"] == "error" => {
                return Some(v["error"].as_str().unwrap_or("(no message)").to_owned());
            }
            Ok(_) => {}
            Err(e) => return Some(format!("not an NDJSON message: {e}")),
        }
    }
    None
}
