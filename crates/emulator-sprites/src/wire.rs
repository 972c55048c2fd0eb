//! The Sprites API's JSON and frames as the emulator writes them.
//!
//! Sources: sprites-go (`websocket.go`, `types.go`, `session.go`, `errors.go`), sprites-py 0.7.2
//! (`websocket.py`, `session.py`, `filesystem.py`, `exceptions.py`), the 2025 in-VM server
//! (`server/api/exec.go`, `exec_http.go`, `pkg/runner/multiplexer.go`), the published API
//! reference, and real captures (`401 {"error":"authentication failed"}`,
//! `500 {"error":"failed to retrieve sprite"}`).

use std::time::SystemTime;

use serde_json::{Value, json};

use super::session::Session;
use execseam_emulator_kit::util::{rfc3339, unix};

/// Client → server: stdin data (`[0x00, data…]`).
pub const STDIN: u8 = 0x00;
/// Server → client: stdout (`[0x01, data…]`).
pub const STDOUT: u8 = 0x01;
/// Server → client: stderr (`[0x02, data…]`).
pub const STDERR: u8 = 0x02;
/// Server → client: exit (`[0x03, code]`, exactly two bytes).
pub const EXIT: u8 = 0x03;
/// Client → server: stdin EOF (exactly `[0x04]`).
pub const STDIN_EOF: u8 = 0x04;
/// The largest payload of one output frame.
pub const MAX_FRAME: usize = 32 * 1024;

/// `{"error": "..."}`.
pub fn error(message: &str) -> Value {
    json!({ "error": message })
}

/// The text `session_info` message (`session_id` an integer, as documented, or a string).
pub fn session_info(
    session: &Session,
    owner: bool,
    as_string: bool,
    tty: Option<(u16, u16)>,
) -> Value {
    let mut v = json!({
        "type": "session_info",
        "session_id": if as_string { json!(session.id.to_string()) } else { json!(session.id) },
        "command": session.command,
        "created": unix(session.created),
        "is_owner": owner,
        "tty": session.tty,
    });
    if let Some((rows, cols)) = tty {
        v["rows"] = json!(rows);
        v["cols"] = json!(cols);
    }
    v
}

/// One entry of `GET /exec` (ids as strings: sprites-go types them so).
pub fn session_entry(s: &Session) -> Value {
    json!({
        "id": s.id.to_string(),
        "command": s.command,
        "workdir": s.workdir,
        "created": rfc3339(s.created),
        "bytes_per_second": s.bytes_per_second(),
        "is_active": s.is_active(),
        "last_activity": rfc3339(s.last_activity()),
        "tty": s.tty,
    })
}

/// The sprite object of `GET /v1/sprites/{name}` (the URL fields are the sprite's own, added
/// by its `info`).
pub fn sprite(name: &str, id: &str, created: SystemTime) -> Value {
    json!({
        "id": id,
        "name": name,
        "organization": "personal",
        "status": "running",
        "created_at": rfc3339(created),
        "updated_at": rfc3339(SystemTime::now()),
        "version": super::SPRITE_VERSION,
        "primary_region": "iad",
        "labels": [],
    })
}
