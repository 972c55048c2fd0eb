//! Feature `serde`: the results and errors as JSON (`serde::Serialize`), in these shapes.
//!
//! | type | JSON |
//! |---|---|
//! | `RelPath` | the path as a string when it is UTF-8, else `{"base64": "…"}` (the exact bytes) |
//! | `Listing<T>` | `{"items": [T…], "omitted": N, "skipped": ["…"]}` |
//! | `Entry` | `{"path", "is_dir"}` |
//! | `Match` | `{"path", "line", "text", "before": [text…], "after": [text…]}`; each text like a `RelPath` |
//! | `FileCount` | `{"path", "count"}` |
//! | `PatchedFile` | `{"path", "change": "created" \| "modified" \| "deleted"}` |
//! | `ToolError` | `{"code", "message", "path", "retry"}` plus the variant's own fields: `kind` and `error` (the core `Error`) for `exec`, `pattern`, `line`, `hunk`, `count`, `exit` and `stderr` where the variant has them |
//!
//! `code` is [`ToolError::code`] (`not-found`, `exec`, …), `kind` is the core
//! [`ErrorKind::as_str`](execseam_core::ErrorKind::as_str), and `retry` has the core shape
//! (`{"class": "never"}`, `{"class": "safe", "after_ms": …}`, `{"class": "unsafe"}`).

use bytes::Bytes;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeStruct, Serializer};

use execseam_adapter_kit::degrade::base64_encode;

use crate::{Change, Entry, FileCount, Listing, Match, PatchedFile, RelPath, ToolError};

/// Text when UTF-8, else `{"base64": …}`.
struct Text<'a>(&'a [u8]);

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(t) => s.serialize_str(t),
            Err(_) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("base64", &base64_encode(self.0))?;
                m.end()
            }
        }
    }
}

struct Lines<'a>(&'a [Bytes]);

impl Serialize for Lines<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|b| Text(b)))
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Text(self.as_bytes()).serialize(s)
    }
}

impl<T: Serialize> Serialize for Listing<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Listing", 3)?;
        m.serialize_field("items", &self.items)?;
        m.serialize_field("omitted", &self.omitted)?;
        m.serialize_field("skipped", &self.skipped)?;
        m.end()
    }
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Entry", 2)?;
        m.serialize_field("path", &self.path)?;
        m.serialize_field("is_dir", &self.is_dir)?;
        m.end()
    }
}

impl Serialize for Match {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Match", 5)?;
        m.serialize_field("path", &self.path)?;
        m.serialize_field("line", &self.line)?;
        m.serialize_field("text", &Text(&self.text))?;
        m.serialize_field("before", &Lines(&self.before))?;
        m.serialize_field("after", &Lines(&self.after))?;
        m.end()
    }
}

impl Serialize for FileCount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("FileCount", 2)?;
        m.serialize_field("path", &self.path)?;
        m.serialize_field("count", &self.count)?;
        m.end()
    }
}

impl Serialize for Change {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for PatchedFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("PatchedFile", 2)?;
        m.serialize_field("path", &self.path)?;
        m.serialize_field("change", &self.change)?;
        m.end()
    }
}

impl Serialize for ToolError {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("code", self.code())?;
        m.serialize_entry("message", &self.to_string())?;
        m.serialize_entry("path", &self.path())?;
        m.serialize_entry("retry", &self.retry())?;
        match self {
            ToolError::Exec(e) => {
                m.serialize_entry("kind", &e.kind())?;
                m.serialize_entry("error", e)?;
            }
            ToolError::InvalidPattern { pattern, .. } => m.serialize_entry("pattern", pattern)?,
            ToolError::InvalidPatch { line, .. } => m.serialize_entry("line", line)?,
            ToolError::PatchConflict { hunk, .. } => m.serialize_entry("hunk", hunk)?,
            ToolError::NotUnique { count, .. } => m.serialize_entry("count", count)?,
            ToolError::Failed { tool, exit, stderr } => {
                m.serialize_entry("tool", tool.as_str())?;
                m.serialize_entry("exit", exit)?;
                m.serialize_entry("stderr", stderr)?;
            }
            _ => {}
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::{Error, ErrorKind, Retry};
    use serde_json::json;

    fn v<T: Serialize>(t: &T) -> serde_json::Value {
        serde_json::to_value(t).unwrap()
    }

    #[test]
    fn shapes() {
        let raw = RelPath::from_bytes(Bytes::from_static(b"bad\xffname"));
        assert_eq!(v(&raw), json!({ "base64": "YmFk/25hbWU=" }));
        let m = Match {
            path: RelPath::new("src/a.rs"),
            line: 3,
            text: Bytes::from_static(b"hit"),
            before: vec![Bytes::from_static(b"\xfe")],
            after: vec![],
        };
        let l = Listing {
            items: vec![m],
            omitted: 2,
            skipped: vec![],
        };
        assert_eq!(
            v(&l),
            json!({ "items": [{ "path": "src/a.rs", "line": 3, "text": "hit",
                "before": [{ "base64": "/g==" }], "after": [] }], "omitted": 2, "skipped": [] })
        );
        let e = ToolError::NotUnique {
            path: "/w/a".into(),
            count: 2,
        };
        assert_eq!(v(&e)["code"], "not-unique");
        assert_eq!(v(&e)["count"], 2);
        assert_eq!(v(&e)["retry"], json!({ "class": "never" }));
        let e = ToolError::Exec(Error::new(ErrorKind::Unavailable, "down").with_retry(Retry::SAFE));
        let j = v(&e);
        assert_eq!(
            (j["code"].clone(), j["kind"].clone()),
            (json!("exec"), json!("unavailable"))
        );
        assert_eq!(j["retry"], json!({ "class": "safe", "after_ms": null }));
        assert_eq!(j["error"]["retry"], j["retry"]);
    }
}
