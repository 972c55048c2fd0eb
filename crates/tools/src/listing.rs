//! glob, list and grep: collect every record, sort by relative path (then line) in plain byte
//! order, and only then truncate. This is the one place ordering and truncation happen.

use bytes::Bytes;
use execseam_core::{Output, Tool};
use execseam_tools_protocol::native::{self, GlobRequest, GrepRequest, NativeRequest};

use crate::error::ToolError;
use crate::glob::Glob;
use crate::path::RelPath;

/// A listing after the library's collect → sort → truncate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing<T> {
    /// The first `limit` items in order (by relative path in plain byte order; then line for
    /// grep).
    pub items: Vec<T>,
    /// How many items came after the limit and were dropped.
    pub omitted: usize,
    /// What the walk could not read (the sandbox's own messages, one per line, sorted), e.g.
    /// `find: '/r/private': Permission denied`. Empty when the walk saw everything.
    pub skipped: Vec<String>,
}

impl<T> Listing<T> {
    /// Every item seen, kept or omitted.
    pub fn total(&self) -> usize {
        self.items.len() + self.omitted
    }
}

/// One entry of `list`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// Relative to the listed directory.
    pub path: RelPath,
    /// A directory (not a symlink to one: symlinks are never followed).
    pub is_dir: bool,
}

/// One matching line of `grep`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Match {
    /// The file, relative to the search root.
    pub path: RelPath,
    /// 1-based line number.
    pub line: u64,
    /// The line without its `\n`, raw bytes (a `\r` of a CRLF file stays).
    pub text: Bytes,
    /// Up to [`GrepOptions::before`](crate::GrepOptions::before) lines before it (lines
    /// `line - before.len() .. line`), in file order, without their `\n`; empty without context.
    pub before: Vec<Bytes>,
    /// Up to [`GrepOptions::after`](crate::GrepOptions::after) lines after it, in file order,
    /// without their `\n`; fewer at the end of the file.
    pub after: Vec<Bytes>,
}

impl Match {
    /// The text, lossily decoded.
    pub fn text_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.text)
    }
}

fn skipped_lines(stderr: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    v.sort_unstable();
    v
}

/// Reads a listing command's output: a typed failure, a result (exit 0 or 1), or `Failed`.
pub(crate) fn check_output(tool: &Tool, out: &Output) -> Result<(), ToolError> {
    if let Some((failure, detail)) = native::Failure::from_output(out) {
        return Err(crate::failure_error(failure, detail, None));
    }
    match out.exit.code() {
        Some(0 | 1) => Ok(()),
        _ => Err(crate::failed(tool, out)),
    }
}

fn relative<'a>(
    provider: &str,
    tool: &Tool,
    root: &str,
    record: &'a [u8],
) -> Result<&'a [u8], ToolError> {
    native::relative(root, record).ok_or_else(|| {
        ToolError::protocol(
            provider,
            tool,
            format!(
                "a record is not below the root {root:?}: {}",
                crate::path::escape(&record[..record.len().min(200)])
            ),
        )
    })
}

fn duplicate(provider: &str, tool: &Tool, what: &[u8]) -> ToolError {
    ToolError::protocol(
        provider,
        tool,
        format!(
            "the same record came twice: {}",
            crate::path::escape(&what[..what.len().min(200)])
        ),
    )
}

/// glob: every non-directory record matching `glob`, sorted, truncated.
pub(crate) fn glob_output(
    provider: &str,
    req: &GlobRequest,
    glob: &Glob,
    out: &Output,
    limit: usize,
) -> Result<Listing<RelPath>, ToolError> {
    let tool = Tool::GLOB;
    check_output(&tool, out)?;
    let stdout = &out.stdout;
    let everything = glob.matches_everything();
    let mut kept: Vec<&[u8]> = Vec::new();
    for rec in native::records(stdout).map_err(ToolError::Exec)? {
        let rel = relative(provider, &tool, &req.root, rec)?;
        if everything || glob.matches(rel) {
            kept.push(rel);
        }
    }
    kept.sort_unstable();
    if let Some(w) = kept.windows(2).find(|w| w[0] == w[1]) {
        return Err(duplicate(provider, &tool, w[0]));
    }
    let total = kept.len();
    kept.truncate(limit);
    let items = kept
        .into_iter()
        .map(|rel| RelPath::from_bytes(stdout.slice_ref(rel)))
        .collect::<Vec<_>>();
    Ok(Listing {
        omitted: total - items.len(),
        items,
        skipped: skipped_lines(&out.stderr),
    })
}

/// list: every record; a directory comes twice.
pub(crate) fn list_output(
    provider: &str,
    root: &str,
    out: &Output,
    limit: usize,
) -> Result<Listing<Entry>, ToolError> {
    let tool = Tool::LIST;
    check_output(&tool, out)?;
    let stdout = &out.stdout;
    let mut all: Vec<&[u8]> = Vec::new();
    for rec in native::records(stdout).map_err(ToolError::Exec)? {
        all.push(relative(provider, &tool, root, rec)?);
    }
    all.sort_unstable();
    let mut entries: Vec<(&[u8], bool)> = Vec::with_capacity(all.len());
    let mut i = 0;
    while i < all.len() {
        let n = all[i..].iter().take_while(|r| **r == all[i]).count();
        match n {
            1 => entries.push((all[i], false)),
            2 => entries.push((all[i], true)),
            _ => return Err(duplicate(provider, &tool, all[i])),
        }
        i += n;
    }
    let total = entries.len();
    entries.truncate(limit);
    let items: Vec<Entry> = entries
        .into_iter()
        .map(|(rel, is_dir)| Entry {
            path: RelPath::from_bytes(stdout.slice_ref(rel)),
            is_dir,
        })
        .collect();
    Ok(Listing {
        omitted: total - items.len(),
        items,
        skipped: skipped_lines(&out.stderr),
    })
}

/// grep: every matching line in a file whose path matches `filter`.
pub(crate) fn grep_output(
    provider: &str,
    req: &GrepRequest,
    filter: Option<&Glob>,
    out: &Output,
    limit: usize,
) -> Result<Listing<Match>, ToolError> {
    let tool = Tool::GREP;
    check_output(&tool, out)?;
    let stdout = &out.stdout;
    let mut kept: Vec<(&[u8], u64, &[u8])> = Vec::new();
    for r in native::grep_records(stdout).map_err(ToolError::Exec)? {
        let rel = relative(provider, &tool, &req.root, r.path)?;
        if filter.is_none_or(|g| g.matches(rel)) {
            kept.push((rel, r.line, r.text));
        }
    }
    // Sort by (path, line) only; the text never decides.
    kept.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    if let Some(w) = kept
        .windows(2)
        .find(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1))
    {
        return Err(duplicate(
            provider,
            &tool,
            format!("{}:{}", crate::path::escape(w[0].0), w[0].1).as_bytes(),
        ));
    }
    let total = kept.len();
    kept.truncate(limit);
    let items: Vec<Match> = kept
        .into_iter()
        .map(|(rel, line, text)| Match {
            path: RelPath::from_bytes(stdout.slice_ref(rel)),
            line,
            text: stdout.slice_ref(text),
            before: Vec::new(),
            after: Vec::new(),
        })
        .collect();
    Ok(Listing {
        omitted: total - items.len(),
        items,
        skipped: skipped_lines(&out.stderr),
    })
}

/// Builds the glob request for `root` and `glob` (the walk narrows on the glob's literal prefix).
pub(crate) fn glob_request(root: &str, glob: &Glob) -> NativeRequest {
    let pf = glob.prefilter();
    NativeRequest::Glob(GlobRequest {
        root: root.to_owned(),
        start: pf.start,
        name: pf.name,
    })
}
