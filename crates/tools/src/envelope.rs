//! The `*** Begin Patch` format coding models emit (OpenAI's `apply_patch` tool):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +every line of the new file, each after a `+`
//! *** Update File: src/lib.rs
//! *** Move to: src/core.rs          (optional: a rename)
//! @@ fn main() {                    (optional: a line to find first, then search below it)
//!  a context line
//! -a removed line
//! +an added line
//! *** End of File                   (optional: the chunk is at the end of the file)
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! Paths are relative to the root (an absolute path below the root is accepted). A chunk's old
//! lines (context and `-`) are searched from the end of the previous chunk (after its `@@` line,
//! when given): first exactly, then ignoring trailing whitespace, then ignoring surrounding
//! whitespace — as the reference implementation does, never fuzzier. A chunk with no old lines
//! appends at the end of the file. The file's line endings are kept: in a CRLF file (its first
//! line ends with `\r\n`) the patch's lines are written with `\r\n`, and a file without a final
//! newline stays without one. An empty line inside a chunk is an empty context line.

use crate::error::ToolError;

/// One operation of an envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Add {
        path: String,
        content: Vec<u8>,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The `@@ LINE` to find before the old lines.
    context: Option<String>,
    old: Vec<String>,
    new: Vec<String>,
    /// `*** End of File`: the old lines end the file.
    eof: bool,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";

fn bad(line: usize, message: impl Into<String>) -> ToolError {
    ToolError::InvalidPatch {
        line,
        message: message.into(),
    }
}

/// The patch's lines, without a heredoc wrapper (`<<'EOF'` … `EOF`) a model may have copied from
/// a shell invocation, with their 1-based numbers in the original text.
fn body(text: &str) -> Vec<(usize, &str)> {
    let mut lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .collect();
    while lines.first().is_some_and(|l| l.1.trim().is_empty()) {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.1.trim().is_empty()) {
        lines.pop();
    }
    if lines.len() >= 2 {
        let first = lines[0].1.trim();
        let last = lines[lines.len() - 1].1.trim();
        if matches!(first, "<<EOF" | "<<'EOF'" | "<<\"EOF\"") && last == "EOF" {
            lines.remove(0);
            lines.pop();
        }
    }
    lines
}

/// True if `text` is an envelope (its first non-blank line is `*** Begin Patch`).
pub(crate) fn is_envelope(text: &str) -> bool {
    body(text).first().is_some_and(|l| l.1.trim() == BEGIN)
}

/// Parses an envelope.
pub(crate) fn parse(text: &str) -> Result<Vec<Op>, ToolError> {
    let lines = body(text);
    match lines.first() {
        Some((_, l)) if l.trim() == BEGIN => {}
        _ => return Err(bad(1, "the first line must be `*** Begin Patch`")),
    }
    match lines.last() {
        Some((_, l)) if l.trim() == END && lines.len() >= 2 => {}
        _ => {
            let n = lines.last().map_or(1, |l| l.0);
            return Err(bad(n, "the last line must be `*** End Patch`"));
        }
    }
    let lines = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (n, l) = lines[i];
        if let Some(p) = l.strip_prefix("*** Add File: ") {
            i += 1;
            let mut content = Vec::new();
            while i < lines.len() && !lines[i].1.starts_with("*** ") {
                let Some(rest) = lines[i].1.strip_prefix('+') else {
                    return Err(bad(
                        lines[i].0,
                        "a line of an added file must start with `+`",
                    ));
                };
                content.extend_from_slice(rest.as_bytes());
                content.push(b'\n');
                i += 1;
            }
            ops.push(Op::Add {
                path: path(p, n)?,
                content,
            });
        } else if let Some(p) = l.strip_prefix("*** Delete File: ") {
            ops.push(Op::Delete { path: path(p, n)? });
            i += 1;
        } else if let Some(p) = l.strip_prefix("*** Update File: ") {
            i += 1;
            let mut move_to = None;
            if let Some(m) = lines.get(i).and_then(|l| l.1.strip_prefix("*** Move to: ")) {
                move_to = Some(path(m, lines[i].0)?);
                i += 1;
            }
            let mut chunks: Vec<Chunk> = Vec::new();
            let mut cur: Option<Chunk> = None;
            while i < lines.len() {
                let (ln, l) = lines[i];
                if l == "*** End of File" {
                    let mut c = cur
                        .take()
                        .ok_or_else(|| bad(ln, "`*** End of File` outside a chunk"))?;
                    c.eof = true;
                    chunks.push(c);
                    i += 1;
                    continue;
                }
                if l.starts_with("*** ") {
                    break;
                }
                if l == "@@" || l.starts_with("@@ ") {
                    chunks.extend(cur.take());
                    let ctx = l[2..].trim();
                    cur = Some(Chunk {
                        context: (!ctx.is_empty()).then(|| ctx.to_owned()),
                        ..Chunk::default()
                    });
                    i += 1;
                    continue;
                }
                if cur.is_none() {
                    if !chunks.is_empty() {
                        return Err(bad(
                            ln,
                            "a chunk after `*** End of File` must start with `@@`",
                        ));
                    }
                    cur = Some(Chunk::default()); // the first chunk may omit `@@`
                }
                let c = cur.as_mut().expect("a chunk is open");
                match l.as_bytes().first() {
                    None => {
                        c.old.push(String::new());
                        c.new.push(String::new());
                    }
                    Some(b' ') => {
                        c.old.push(l[1..].to_owned());
                        c.new.push(l[1..].to_owned());
                    }
                    Some(b'-') => c.old.push(l[1..].to_owned()),
                    Some(b'+') => c.new.push(l[1..].to_owned()),
                    Some(_) => {
                        return Err(bad(
                            ln,
                            format!("a chunk line must start with ` `, `-` or `+`: {l:?}"),
                        ));
                    }
                }
                i += 1;
            }
            chunks.extend(cur.take());
            if chunks.iter().all(|c| c.old.is_empty() && c.new.is_empty()) && move_to.is_none() {
                return Err(bad(n, format!("`*** Update File: {p}` changes nothing")));
            }
            ops.push(Op::Update {
                path: path(p, n)?,
                move_to,
                chunks,
            });
        } else {
            return Err(bad(
                n,
                format!(
                    "expected `*** Add File: `, `*** Update File: `, `*** Delete File: ` or `*** End Patch`, found {l:?}"
                ),
            ));
        }
    }
    if ops.is_empty() {
        return Err(bad(1, "the patch has no file operations"));
    }
    Ok(ops)
}

fn path(p: &str, line: usize) -> Result<String, ToolError> {
    let p = p.trim();
    if p.is_empty() {
        return Err(bad(line, "a file operation without a path"));
    }
    Ok(p.to_owned())
}

/// Where `pattern` occurs in `lines` at or after `from`: exact, then ignoring trailing
/// whitespace, then surrounding whitespace. With `eof`, the end of the file is tried first.
fn seek(lines: &[&[u8]], pattern: &[String], from: usize, eof: bool) -> Option<usize> {
    if pattern.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pattern.len();
    let eq: [fn(&[u8], &str) -> bool; 3] = [
        |a, b| a == b.as_bytes(),
        |a, b| a.trim_ascii_end() == b.trim_end().as_bytes(),
        |a, b| a.trim_ascii() == b.trim().as_bytes(),
    ];
    for f in eq {
        let fits = |at: usize| pattern.iter().zip(&lines[at..]).all(|(p, l)| f(l, p));
        if eof && last >= from && fits(last) {
            return Some(last);
        }
        if let Some(at) = (from..=last).find(|&at| fits(at)) {
            return Some(at);
        }
    }
    None
}

/// Applies an update's chunks to `content`: the new content (the file's line endings kept), or a
/// conflict (1-based chunk, message).
pub(crate) fn apply(content: &[u8], chunks: &[Chunk]) -> Result<Vec<u8>, (usize, String)> {
    let mut lines: Vec<&[u8]> = content.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut edits: Vec<(usize, usize, Vec<String>)> = Vec::new(); // (at, old len, new lines)
    let mut cursor = 0usize;
    for (k, c) in chunks.iter().enumerate() {
        if let Some(ctx) = &c.context {
            let at = seek(&lines, std::slice::from_ref(ctx), cursor, false)
                .ok_or_else(|| (k + 1, format!("its `@@ {ctx}` line is not in the file")))?;
            cursor = at + 1;
        }
        if c.old.is_empty() {
            edits.push((lines.len(), 0, c.new.clone()));
            continue;
        }
        let (mut old, mut new) = (&c.old[..], &c.new[..]);
        let mut at = seek(&lines, old, cursor, c.eof);
        if at.is_none() && old.last().is_some_and(String::is_empty) {
            // A trailing empty context line is often the patch's own final newline.
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            at = seek(&lines, old, cursor, c.eof);
        }
        let at = at.ok_or_else(|| {
            let shown: Vec<&str> = c.old.iter().map(String::as_str).take(3).collect();
            (
                k + 1,
                format!(
                    "its {} old lines are not in the file (below line {cursor}), starting {:?}",
                    c.old.len(),
                    shown.join("\n")
                ),
            )
        })?;
        edits.push((at, old.len(), new.to_vec()));
        cursor = at + old.len();
    }
    // The file's own line endings are kept: the patch's lines (whose `\r` the parser drops)
    // take the file's CRLF when its first line ends so, and a file without a final newline
    // stays without one.
    let crlf = content
        .iter()
        .position(|&b| b == b'\n')
        .is_some_and(|i| i > 0 && content[i - 1] == b'\r');
    let final_newline = content.is_empty() || content.ends_with(b"\n");
    // (bytes, from the patch)
    let mut out: Vec<(Vec<u8>, bool)> = lines.iter().map(|l| (l.to_vec(), false)).collect();
    edits.sort_by_key(|e| e.0);
    for (at, n, new) in edits.into_iter().rev() {
        out.splice(at..at + n, new.into_iter().map(|l| (l.into_bytes(), true)));
    }
    let mut bytes = Vec::with_capacity(content.len() + 64);
    let last = out.len();
    for (i, (l, patched)) in out.into_iter().enumerate() {
        bytes.extend_from_slice(&l);
        if i + 1 < last || final_newline {
            if patched && crlf {
                bytes.push(b'\r');
            }
            bytes.push(b'\n');
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(p: &str) -> Vec<Chunk> {
        match parse(p).unwrap().remove(0) {
            Op::Update { chunks, .. } => chunks,
            other => panic!("{other:?}"),
        }
    }

    fn apply_str(content: &str, p: &str) -> Result<String, (usize, String)> {
        apply(content.as_bytes(), &update(p)).map(|v| String::from_utf8(v).unwrap())
    }

    const BASE: &str = "fn a() {\n    one\n}\n\nfn b() {\n    one\n}\n";

    #[test]
    fn parses_every_operation() {
        let p = "*** Begin Patch\n*** Add File: n.txt\n+x\n+\n*** Delete File: d.txt\n*** Update File: u.rs\n*** Move to: v.rs\n@@ fn b() {\n-    one\n+    two\n*** End Patch\n";
        let ops = parse(p).unwrap();
        assert_eq!(
            ops[0],
            Op::Add {
                path: "n.txt".into(),
                content: b"x\n\n".to_vec()
            }
        );
        assert_eq!(
            ops[1],
            Op::Delete {
                path: "d.txt".into()
            }
        );
        let Op::Update {
            path,
            move_to,
            chunks,
        } = &ops[2]
        else {
            panic!()
        };
        assert_eq!((path.as_str(), move_to.as_deref()), ("u.rs", Some("v.rs")));
        assert_eq!(chunks[0].context.as_deref(), Some("fn b() {"));
        assert!(is_envelope(p));
        assert!(is_envelope(
            "\n<<'EOF'\n*** Begin Patch\n*** Delete File: x\n*** End Patch\nEOF\n"
        ));
        assert!(!is_envelope("--- a\n+++ b\n"));
    }

    #[test]
    fn context_line_picks_the_occurrence() {
        let p =
            "*** Begin Patch\n*** Update File: x\n@@ fn b() {\n-    one\n+    two\n*** End Patch";
        assert_eq!(
            apply_str(BASE, p).unwrap(),
            "fn a() {\n    one\n}\n\nfn b() {\n    two\n}\n"
        );
        // Without it, the first occurrence.
        let p = "*** Begin Patch\n*** Update File: x\n-    one\n+    two\n*** End Patch";
        assert!(
            apply_str(BASE, p)
                .unwrap()
                .starts_with("fn a() {\n    two\n")
        );
    }

    #[test]
    fn whitespace_tolerance_end_of_file_and_append() {
        let p = "*** Begin Patch\n*** Update File: x\n@@\n-a  \n+A\n*** End Patch";
        // A file without a final newline stays without one.
        assert_eq!(apply_str("a\nb", p).unwrap(), "A\nb");
        let p = "*** Begin Patch\n*** Update File: x\n@@\n-a\n+Z\n*** End of File\n*** End Patch";
        assert_eq!(apply_str("a\nb\na\n", p).unwrap(), "a\nb\nZ\n");
        let p = "*** Begin Patch\n*** Update File: x\n@@\n+tail\n*** End Patch";
        assert_eq!(apply_str("a\n", p).unwrap(), "a\ntail\n");
    }

    #[test]
    fn line_endings_are_the_files() {
        // CRLF: untouched lines keep their bytes, the patch's lines (context too) take `\r\n`.
        let p = "*** Begin Patch\n*** Update File: x\n one\n-two\n+TWO\n+2b\n three\n*** End Patch";
        assert_eq!(
            apply_str("zero\r\none\r\ntwo\r\nthree\r\nfour\r\n", p).unwrap(),
            "zero\r\none\r\nTWO\r\n2b\r\nthree\r\nfour\r\n"
        );
        // A patch written with CRLF on an LF file: the file's LF wins.
        let p = "*** Begin Patch\r\n*** Update File: x\r\n-b\r\n+B\r\n*** End Patch\r\n";
        assert_eq!(apply_str("a\nb\nc\n", p).unwrap(), "a\nB\nc\n");
        // No final newline, the last line replaced: still none.
        let p = "*** Begin Patch\n*** Update File: x\n-c\n+C\n*** End of File\n*** End Patch";
        assert_eq!(apply_str("a\r\nc", p).unwrap(), "a\r\nC");
    }

    #[test]
    fn conflicts_and_malformed_patches() {
        let p = "*** Begin Patch\n*** Update File: x\n@@\n-nope\n+x\n*** End Patch";
        let (k, msg) = apply_str(BASE, p).unwrap_err();
        assert_eq!(k, 1);
        assert!(msg.contains("not in the file"), "{msg}");
        let p = "*** Begin Patch\n*** Update File: x\n@@ fn zz\n-    one\n*** End Patch";
        assert!(apply_str(BASE, p).unwrap_err().1.contains("fn zz"));
        for (p, needle) in [
            ("*** Begin Patch\n*** End Patch", "no file operations"),
            ("*** Begin Patch\n*** Add File: x\n+a\n", "last line"),
            (
                "*** Begin Patch\n*** Add File: x\nno plus\n*** End Patch",
                "must start with `+`",
            ),
            (
                "*** Begin Patch\n*** Frobnicate: x\n*** End Patch",
                "expected",
            ),
            (
                "*** Begin Patch\n*** Update File: x\n?x\n*** End Patch",
                "chunk line",
            ),
            (
                "*** Begin Patch\n*** Update File: x\n*** End Patch",
                "changes nothing",
            ),
            (
                "*** Begin Patch\n*** Delete File: \n*** End Patch",
                "without a path",
            ),
        ] {
            match parse(p) {
                Err(ToolError::InvalidPatch { message, .. }) => {
                    assert!(message.contains(needle), "{p:?}: {message}")
                }
                other => panic!("{p:?}: {other:?}"),
            }
        }
    }
}
