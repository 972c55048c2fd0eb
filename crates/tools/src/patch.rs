//! Unified diffs, parsed and applied in Rust.
//!
//! Accepted: `--- OLD` / `+++ NEW` file headers (anything before, such as `diff --git` and
//! `index` lines, is ignored; a tab and what follows it ends a path; git's `"quoted"` paths are
//! unquoted), `@@ -a,b +c,d @@` hunks of ` `, `-`, `+` lines and `\ No newline at end of file`.
//! `/dev/null` as the old path creates a file, as the new path deletes one. When both paths carry
//! git's `a/` and `b/` prefixes (or one side is `/dev/null` and the other has its prefix), the
//! prefixes are dropped; paths are otherwise taken as they are, relative to the root.
//!
//! A hunk applies where its old lines (context and `-` lines, byte-exact, line endings included)
//! are found: at its stated line, or else at the nearest line above or below it (an offset, as
//! `git apply` allows; never fuzz), and never before the end of the previous hunk.

use crate::error::ToolError;

/// One file's section of a patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FilePatch {
    /// Relative path of the old file (`None` for a creation).
    pub old: Option<String>,
    /// Relative path of the new file (`None` for a deletion).
    pub new: Option<String>,
    pub hunks: Vec<Hunk>,
}

impl FilePatch {
    /// The path the section is about.
    pub fn path(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or("")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hunk {
    old_start: u64,
    old_count: u64,
    /// Lines with their `\n` (except a last line marked `\ No newline at end of file`).
    old: Vec<Vec<u8>>,
    new: Vec<Vec<u8>>,
}

fn bad(line: usize, message: impl Into<String>) -> ToolError {
    ToolError::InvalidPatch {
        line,
        message: message.into(),
    }
}

/// Git's C-style quoting: `"a\tb\303\251"`.
fn unquote(s: &str, line: usize) -> Result<String, ToolError> {
    let inner = &s[1..s.len() - 1];
    let mut out = Vec::new();
    let b = inner.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = *b
            .get(i + 1)
            .ok_or_else(|| bad(line, "a quoted path ends in `\\`"))?;
        i += 2;
        out.push(match c {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'a' => 7,
            b'b' => 8,
            b'f' => 12,
            b'v' => 11,
            b'\\' => b'\\',
            b'"' => b'"',
            b'0'..=b'7' => {
                let digits = &b[i - 1..(i + 2).min(b.len())];
                if digits.len() != 3 || !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                    return Err(bad(line, "a bad octal escape in a quoted path"));
                }
                i += 2;
                u8::try_from(
                    digits
                        .iter()
                        .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0')),
                )
                .map_err(|_| bad(line, "a bad octal escape in a quoted path"))?
            }
            _ => return Err(bad(line, format!("an unknown escape `\\{}`", c as char))),
        });
    }
    String::from_utf8(out).map_err(|_| bad(line, "a quoted path is not UTF-8"))
}

fn header_path(rest: &str, line: usize) -> Result<String, ToolError> {
    let rest = rest.trim_end_matches('\r');
    if rest.starts_with('"') {
        // The closing quote is the first one not escaped by a backslash.
        let b = rest.as_bytes();
        let mut i = 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => return unquote(&rest[..=i], line),
                _ => i += 1,
            }
        }
        return Err(bad(line, "an unterminated quoted path"));
    }
    let p = rest.split('\t').next().unwrap_or("");
    if p.is_empty() {
        return Err(bad(line, "a file header without a path"));
    }
    Ok(p.to_owned())
}

fn parse_range(s: &str, line: usize) -> Result<(u64, u64), ToolError> {
    let (start, count) = match s.split_once(',') {
        Some((a, b)) => (a, b),
        None => (s, "1"),
    };
    let p = |x: &str| {
        x.parse::<u64>()
            .map_err(|_| bad(line, format!("a bad hunk range {s:?}")))
    };
    Ok((p(start)?, p(count)?))
}

/// Parses a unified diff.
pub(crate) fn parse(text: &str) -> Result<Vec<FilePatch>, ToolError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_end_matches('\n');
        if !l.starts_with("--- ") {
            if l.starts_with("@@ ") {
                return Err(bad(i + 1, "a hunk before any `---`/`+++` file header"));
            }
            if l.starts_with("rename from ") || l.starts_with("copy from ") {
                return Err(bad(i + 1, "renames and copies are not supported"));
            }
            if l.starts_with("GIT binary patch") || l.starts_with("Binary files ") {
                return Err(bad(i + 1, "binary patches are not supported"));
            }
            i += 1;
            continue;
        }
        let old_raw = header_path(&l[4..], i + 1)?;
        let plus = lines
            .get(i + 1)
            .map(|s| s.trim_end_matches('\n'))
            .filter(|s| s.starts_with("+++ "))
            .ok_or_else(|| bad(i + 2, "a `---` header not followed by `+++`"))?;
        let new_raw = header_path(&plus[4..], i + 2)?;
        i += 2;
        let dev_null = |p: &str| p == "/dev/null";
        let (old, new) = strip_prefixes(
            (!dev_null(&old_raw)).then_some(old_raw),
            (!dev_null(&new_raw)).then_some(new_raw),
        );
        if old.is_none() && new.is_none() {
            return Err(bad(i, "both sides are /dev/null"));
        }
        let mut hunks = Vec::new();
        while i < lines.len() && lines[i].starts_with("@@ ") {
            let h = lines[i].trim_end_matches('\n').trim_end_matches('\r');
            let hline = i + 1;
            let body = h[3..]
                .split(" @@")
                .next()
                .ok_or_else(|| bad(hline, "a malformed hunk header"))?;
            let mut parts = body.split(' ');
            let (old_r, new_r) = match (parts.next(), parts.next()) {
                (Some(o), Some(n)) if o.starts_with('-') && n.starts_with('+') => (o, n),
                _ => return Err(bad(hline, "a malformed hunk header")),
            };
            let (old_start, old_count) = parse_range(&old_r[1..], hline)?;
            let (_, new_count) = parse_range(&new_r[1..], hline)?;
            i += 1;
            let (mut o, mut n) = (0u64, 0u64);
            let mut hunk = Hunk {
                old_start,
                old_count,
                old: Vec::new(),
                new: Vec::new(),
            };
            // Which side(s) the previous line went to, for `\ No newline`.
            let mut last: (bool, bool) = (false, false);
            while o < old_count
                || n < new_count
                || lines.get(i).is_some_and(|l| l.starts_with('\\'))
            {
                let Some(raw) = lines.get(i) else {
                    return Err(bad(i, "the patch ends inside a hunk"));
                };
                let (tag, content) = match raw.as_bytes().first() {
                    Some(b'\n') => (b' ', "\n"),
                    Some(&t) => (t, &raw[1..]),
                    None => (b' ', ""),
                };
                match tag {
                    b' ' => {
                        hunk.old.push(content.as_bytes().to_vec());
                        hunk.new.push(content.as_bytes().to_vec());
                        o += 1;
                        n += 1;
                        last = (true, true);
                    }
                    b'-' => {
                        hunk.old.push(content.as_bytes().to_vec());
                        o += 1;
                        last = (true, false);
                    }
                    b'+' => {
                        hunk.new.push(content.as_bytes().to_vec());
                        n += 1;
                        last = (false, true);
                    }
                    b'\\' => {
                        if last == (false, false) {
                            return Err(bad(i + 1, "`\\ No newline` with no line before it"));
                        }
                        for (side, yes) in [(&mut hunk.old, last.0), (&mut hunk.new, last.1)] {
                            if yes
                                && let Some(l) = side.last_mut()
                                && l.last() == Some(&b'\n')
                            {
                                l.pop();
                            }
                        }
                        last = (false, false);
                    }
                    _ => {
                        return Err(bad(
                            i + 1,
                            "a hunk line that is not ` `, `-`, `+` or `\\` (or the hunk's counts are wrong)",
                        ));
                    }
                }
                if o > old_count || n > new_count {
                    return Err(bad(i + 1, "the hunk has more lines than its header says"));
                }
                i += 1;
            }
            hunks.push(hunk);
        }
        if hunks.is_empty() && (old.is_some() && new.is_some()) {
            return Err(bad(i, "a file section without hunks"));
        }
        files.push(FilePatch { old, new, hunks });
    }
    if files.is_empty() {
        return Err(bad(1, "no `---`/`+++` file header: not a unified diff"));
    }
    Ok(files)
}

fn strip_prefixes(old: Option<String>, new: Option<String>) -> (Option<String>, Option<String>) {
    let git = match (&old, &new) {
        (Some(o), Some(n)) => o.starts_with("a/") && n.starts_with("b/"),
        (Some(o), None) => o.starts_with("a/"),
        (None, Some(n)) => n.starts_with("b/"),
        (None, None) => false,
    };
    if git {
        (
            old.map(|o| o[2..].to_owned()),
            new.map(|n| n[2..].to_owned()),
        )
    } else {
        (old, new)
    }
}

/// Splits content into lines, each with its `\n` (the last may have none).
fn split_lines(content: &[u8]) -> Vec<&[u8]> {
    content.split_inclusive(|&b| b == b'\n').collect()
}

/// Applies the hunks to `content`: the new content, or a conflict (hunk index, message).
pub(crate) fn apply(content: &[u8], hunks: &[Hunk]) -> Result<Vec<u8>, (usize, String)> {
    let lines = split_lines(content);
    let mut out: Vec<u8> = Vec::with_capacity(content.len());
    let mut cursor = 0usize; // next unconsumed line of `lines`
    for (k, h) in hunks.iter().enumerate() {
        // Line numbers refer to the original file, which is what `lines` holds.
        let stated = if h.old_count == 0 {
            h.old_start
        } else {
            h.old_start.saturating_sub(1)
        } as usize;
        let n = h.old.len();
        let fits = |at: usize| {
            at >= cursor
                && at + n <= lines.len()
                && h.old
                    .iter()
                    .zip(&lines[at..at + n])
                    .all(|(a, b)| a.as_slice() == *b)
        };
        let at = if n == 0 {
            // A pure insertion has nothing to match: it goes exactly where it says.
            (stated >= cursor && stated <= lines.len()).then_some(stated)
        } else {
            let max = lines.len().saturating_sub(n);
            (0..=lines.len())
                .flat_map(|d| {
                    [
                        stated.checked_sub(d),
                        stated.checked_add(d).filter(|&x| d > 0 && x <= max),
                    ]
                })
                .flatten()
                .find(|&at| fits(at))
        };
        let Some(at) = at else {
            let msg = if n == 0 {
                format!(
                    "it inserts after line {} but the file has {} lines",
                    h.old_start,
                    lines.len()
                )
            } else {
                let first_bad = h
                    .old
                    .iter()
                    .zip(lines.get(stated..).unwrap_or(&[]))
                    .position(|(a, b)| a.as_slice() != *b);
                match first_bad {
                    Some(j) => format!(
                        "its lines are not in the file (at line {}: expected {}, found {})",
                        stated + j + 1,
                        crate::path::escape(&h.old[j]),
                        crate::path::escape(lines[stated + j])
                    ),
                    None => format!(
                        "its {n} lines from line {} are not in the file (it has {} lines)",
                        stated + 1,
                        lines.len()
                    ),
                }
            };
            return Err((k + 1, msg));
        };
        for l in &lines[cursor..at] {
            out.extend_from_slice(l);
        }
        for l in &h.new {
            out.extend_from_slice(l);
        }
        cursor = at + n;
    }
    for l in &lines[cursor..] {
        out.extend_from_slice(l);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_str(content: &str, patch: &str) -> Result<String, (usize, String)> {
        let files = parse(patch).unwrap();
        apply(content.as_bytes(), &files[0].hunks).map(|v| String::from_utf8(v).unwrap())
    }

    const BASE: &str = "one\ntwo\nthree\nfour\nfive\n";

    #[test]
    fn applies_a_git_diff() {
        let p = "diff --git a/x.txt b/x.txt\nindex 1..2 100644\n--- a/x.txt\n+++ b/x.txt\n@@ -2,3 +2,3 @@\n two\n-three\n+THREE\n four\n";
        let files = parse(p).unwrap();
        assert_eq!(files[0].old.as_deref(), Some("x.txt"));
        assert_eq!(files[0].new.as_deref(), Some("x.txt"));
        assert_eq!(apply_str(BASE, p).unwrap(), "one\ntwo\nTHREE\nfour\nfive\n");
    }

    #[test]
    fn applies_with_an_offset_but_never_fuzz() {
        let p = "--- x\n+++ x\n@@ -1,2 +1,2 @@\n four\n-five\n+FIVE\n";
        assert_eq!(apply_str(BASE, p).unwrap(), "one\ntwo\nthree\nfour\nFIVE\n");
        let p = "--- x\n+++ x\n@@ -1,2 +1,2 @@\n four\n-fiv\n+FIVE\n";
        let (hunk, msg) = apply_str(BASE, p).unwrap_err();
        assert_eq!(hunk, 1);
        assert!(msg.contains("not in the file"), "{msg}");
    }

    #[test]
    fn handles_missing_final_newlines() {
        let p = "--- x\n+++ x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n";
        assert_eq!(apply_str("a", p).unwrap(), "a\n");
        let p = "--- x\n+++ x\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n";
        assert_eq!(apply_str("a\n", p).unwrap(), "b");
        // The old side says "no newline" but the file has one: a conflict.
        let p = "--- x\n+++ x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n";
        assert!(apply_str("a\n", p).is_err());
    }

    #[test]
    fn creation_deletion_and_insertion() {
        let p = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n";
        let f = parse(p).unwrap();
        assert_eq!(
            (f[0].old.as_deref(), f[0].new.as_deref()),
            (None, Some("new.txt"))
        );
        assert_eq!(apply(b"", &f[0].hunks).unwrap(), b"x\ny\n");
        let p = "--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n";
        let f = parse(p).unwrap();
        assert_eq!(
            (f[0].old.as_deref(), f[0].new.as_deref()),
            (Some("old.txt"), None)
        );
        assert_eq!(apply(b"x\ny\n", &f[0].hunks).unwrap(), b"");
        let p = "--- x\n+++ x\n@@ -2,0 +3,1 @@\n+ins\n";
        assert_eq!(
            apply_str(BASE, p).unwrap(),
            "one\ntwo\nins\nthree\nfour\nfive\n"
        );
    }

    #[test]
    fn several_hunks_and_files() {
        let p = "--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n-one\n+ONE\n@@ -5 +5,2 @@\n-five\n+five\n+six\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-y\n+Y\n";
        let f = parse(p).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(
            String::from_utf8(apply(BASE.as_bytes(), &f[0].hunks).unwrap()).unwrap(),
            "ONE\ntwo\nthree\nfour\nfive\nsix\n"
        );
        assert_eq!(f[1].path(), "y");
    }

    #[test]
    fn malformed_patches_are_typed() {
        for (p, needle) in [
            ("", "not a unified diff"),
            ("hello\n", "not a unified diff"),
            ("@@ -1 +1 @@\n-a\n+b\n", "before any"),
            ("--- a\nxx\n", "not followed by `+++`"),
            ("--- a\n+++ a\n@@ -1,2 +1,2 @@\n-a\n", "ends inside a hunk"),
            ("--- a\n+++ a\n@@ -1 +1 @@\n?a\n", "not ` `"),
            ("--- a\n+++ a\n@@ -x +1 @@\n", "bad hunk range"),
            ("--- a\n+++ a\n", "without hunks"),
            ("rename from a\n", "renames"),
        ] {
            match parse(p) {
                Err(ToolError::InvalidPatch { message, .. }) => {
                    assert!(message.contains(needle), "{p:?}: {message}")
                }
                other => panic!("{p:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn quoted_paths() {
        let p =
            "--- \"a/sp ace\\t\\303\\251\"\n+++ \"b/sp ace\\t\\303\\251\"\n@@ -1 +1 @@\n-a\n+b\n";
        let f = parse(p).unwrap();
        assert_eq!(f[0].new.as_deref(), Some("sp ace\té"));
    }
}
