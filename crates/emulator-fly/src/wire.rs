//! The Machines API's JSON as the emulator reads and writes it.
//!
//! Shapes: the Machines OpenAPI spec (`MachineExecRequest`, `flydv1.ExecResponse`,
//! `ErrorResponse`, `Machine`, `Lease`), fly-go `machine_types.go`, and the Machines API docs
//! (start/stop/wait/lease examples). Unknown input fields are ignored.

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `MachineExecRequest` (every field optional; `cmd` is the deprecated string form that fly-go
/// and flyctl still send; `machine` was added to fly-go in 2026).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ExecRequest {
    /// argv.
    pub command: Option<Vec<String>>,
    /// Deprecated: one string, split shell-words style (no expansion, no shell).
    pub cmd: Option<String>,
    /// The whole of stdin.
    pub stdin: Option<String>,
    /// Seconds.
    pub timeout: Option<i64>,
    /// The container of a multi-container machine (accepted, ignored: one container here).
    pub container: Option<String>,
    /// Run in the machine's own namespace (accepted, ignored).
    pub machine: Option<bool>,
}

/// `POST /v1/apps/{app}/machines` body (the fields the emulator uses).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct CreateMachineRequest {
    /// The machine's name.
    pub name: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// Create it without starting it.
    pub skip_launch: Option<bool>,
    /// `config` (`image`, `env`, …).
    pub config: Option<Value>,
}

/// `POST …/lease` body.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LeaseRequest {
    /// Seconds.
    pub ttl: Option<u64>,
    /// Free text.
    pub description: Option<String>,
}

/// `flydv1.ExecResponse`. With `omit_empty` (protobuf JSON), zero values are left out.
pub fn exec_response(
    stdout: &str,
    stderr: &str,
    exit_code: i64,
    exit_signal: i64,
    omit_empty: bool,
) -> Value {
    let mut m = Map::new();
    if !omit_empty || !stdout.is_empty() {
        m.insert("stdout".into(), json!(stdout));
    }
    if !omit_empty || !stderr.is_empty() {
        m.insert("stderr".into(), json!(stderr));
    }
    if !omit_empty || exit_code != 0 {
        m.insert("exit_code".into(), json!(exit_code));
    }
    if !omit_empty || exit_signal != 0 {
        m.insert("exit_signal".into(), json!(exit_signal));
    }
    Value::Object(m)
}

/// The spec's `ErrorResponse`: `{"error": "..."}`.
pub fn error(message: &str) -> Value {
    json!({ "error": message })
}

/// Bytes as Go's `encoding/json` writes them into a string: every byte of an invalid UTF-8
/// sequence becomes U+FFFD.
pub fn go_string(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        s.push_str(chunk.valid());
        for _ in chunk.invalid() {
            s.push('\u{FFFD}');
        }
    }
    s
}

/// Splits the deprecated `cmd` string into argv: whitespace separates words, single quotes are
/// literal, double quotes allow `\"`, `\\`, `\$` and `` \` ``, a backslash outside quotes escapes
/// the next character; no expansion of any kind. `None` for an unterminated quote.
pub fn split_words(s: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => cur.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => cur.push(c),
                            '\n' => {}
                            c => {
                                cur.push('\\');
                                cur.push(c);
                            }
                        },
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(c) => cur.push(c),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omit_empty_drops_zero_values() {
        assert_eq!(exec_response("", "", 0, 0, true), json!({}));
        assert_eq!(
            exec_response("hi\n", "", 0, 0, true),
            json!({"stdout": "hi\n"})
        );
        assert_eq!(
            exec_response("", "", 0, 0, false),
            json!({"stdout": "", "stderr": "", "exit_code": 0, "exit_signal": 0})
        );
    }

    #[test]
    fn invalid_utf8_becomes_one_replacement_per_byte() {
        assert_eq!(go_string(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(go_string(b"\xf0\x9f\x98"), "\u{FFFD}\u{FFFD}\u{FFFD}");
        assert_eq!(go_string("é✓".as_bytes()), "é✓");
    }

    #[test]
    fn cmd_strings_split_like_shell_words() {
        assert_eq!(
            split_words(r#"bash -c "echo $S3_ARCHIVE_CONFIG""#).unwrap(),
            ["bash", "-c", "echo $S3_ARCHIVE_CONFIG"]
        );
        assert_eq!(
            split_words(r#"printf '%s\n' a\ b "" 'it''s'"#).unwrap(),
            ["printf", "%s\\n", "a b", "", "its"]
        );
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
        assert!(split_words("'open").is_none());
    }
}
