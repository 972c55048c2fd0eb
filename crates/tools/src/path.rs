use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;

use crate::error::ToolError;

/// A path relative to the walk root, exactly as the sandbox named it (raw bytes: any byte but NUL,
/// newlines included, not necessarily UTF-8).
///
/// Ordered by its bytes (plain byte order, which is code-point order for UTF-8), the order every
/// listing is sorted in. [`RelPath::as_str`] is `None` for a name that is not valid UTF-8; such a
/// path is still listed (never dropped, never mangled), but it cannot be handed back to `read`
/// or `write`, whose paths travel in argv, which is UTF-8.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(Bytes);

impl RelPath {
    pub(crate) fn from_bytes(b: Bytes) -> RelPath {
        RelPath(b)
    }

    /// A path from text (for tests and hosts that build expectations).
    pub fn new(s: &str) -> RelPath {
        RelPath(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path as UTF-8, if it is.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The path with invalid UTF-8 replaced by U+FFFD (for display only: lossy).
    pub fn to_string_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// The absolute path under `root` (as UTF-8 if it is).
    pub fn under(&self, root: &str) -> Option<String> {
        let rel = self.as_str()?;
        Some(if root == "/" {
            format!("/{rel}")
        } else {
            format!("{root}/{rel}")
        })
    }
}

/// Lossless: invalid bytes are written `\xNN`, a backslash `\\`, control characters escaped.
impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(&self.0))
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", escape(&self.0))
    }
}

/// Bytes as text, losslessly: `\\`, `\n`, `\t`, `\r`, `\u{..}` for other controls, `\xNN` for
/// bytes that are not UTF-8.
pub fn escape(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '\n' => s.push_str("\\n"),
                '\t' => s.push_str("\\t"),
                '\r' => s.push_str("\\r"),
                c if c.is_control() => {
                    let _ = write!(s, "\\u{{{:x}}}", c as u32);
                }
                c => s.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(s, "\\x{byte:02x}");
        }
    }
    s
}

/// Normalises an absolute path: collapses `//` and `.` components and a trailing `/`. A relative
/// path, a `..` component or a NUL byte is [`ToolError::InvalidArgument`] (`..` is refused rather
/// than resolved, since resolving it lexically is wrong through symlinks).
pub fn normalize_absolute(what: &str, path: &str) -> Result<String, ToolError> {
    if !path.starts_with('/') {
        return Err(ToolError::invalid(format!(
            "{what} {path:?} is not absolute"
        )));
    }
    if path.contains('\0') {
        return Err(ToolError::invalid(format!("{what} contains a NUL byte")));
    }
    let mut out = String::with_capacity(path.len());
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                return Err(ToolError::invalid(format!(
                    "{what} {path:?} has a `..` component"
                )));
            }
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Normalises a path relative to a root (patch targets): no leading `/`, no `..`.
pub(crate) fn normalize_relative(path: &str) -> Result<String, String> {
    if path.starts_with('/') {
        return Err(format!(
            "{path:?} is absolute; patch paths are relative to the root"
        ));
    }
    let mut parts = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(format!("{path:?} has a `..` component")),
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Err(format!("{path:?} names no file"));
    }
    Ok(parts.join("/"))
}

/// `root` joined with a relative path.
pub(crate) fn join(root: &str, rel: &str) -> String {
    if root == "/" {
        format!("/{rel}")
    } else {
        format!("{root}/{rel}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_absolute_paths() {
        assert_eq!(normalize_absolute("p", "/").unwrap(), "/");
        assert_eq!(normalize_absolute("p", "//a/./b/").unwrap(), "/a/b");
        assert_eq!(normalize_absolute("p", "/a b/é").unwrap(), "/a b/é");
        for bad in ["", "a", "./a", "/a/../b", "/a\0"] {
            assert!(matches!(
                normalize_absolute("p", bad),
                Err(ToolError::InvalidArgument { .. })
            ));
        }
    }

    #[test]
    fn display_is_lossless() {
        let p = RelPath::from_bytes(Bytes::from_static(b"a\\b\nc\xff\x01"));
        assert_eq!(p.to_string(), "a\\\\b\\nc\\xff\\u{1}");
        assert_eq!(p.as_str(), None);
        assert_eq!(RelPath::new("x/y").under("/"), Some("/x/y".into()));
        assert_eq!(RelPath::new("x/y").under("/r"), Some("/r/x/y".into()));
    }
}
