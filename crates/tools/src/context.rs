//! grep's context lines: after the search, the files of the kept matches are read by one command
//! (size-framed, so any byte may appear), and each match gets its neighbouring lines.

use bytes::Bytes;
use execseam_core::{Command, Tool};
use execseam_tools_protocol::native;

use crate::Tools;
use crate::error::ToolError;
use crate::listing::Match;

/// For each file `$@`: `SIZE\n` then exactly SIZE bytes, or `x\n` when it is no longer a readable
/// regular file.
const CONTEXT_SCRIPT: &str = r#"for p do
  if [ -f "$p" ] && [ -r "$p" ]; then
    n=$(wc -c < "$p") || exit 1
    printf '%s\n' $n
    head -c "$n" -- "$p" || exit 1
  else
    printf 'x\n'
  fi
done
"#;

pub(crate) async fn fill(
    tools: &Tools<'_>,
    root: &str,
    items: &mut [Match],
    before: usize,
    after: usize,
) -> Result<(), ToolError> {
    // Distinct files in order (items are sorted by path); a name that is not UTF-8 cannot be
    // named in argv and gets no context.
    let mut files: Vec<(usize, String)> = Vec::new(); // (first item index, absolute path)
    for (i, m) in items.iter().enumerate() {
        if files.last().is_some_and(|(j, _)| items[*j].path == m.path) {
            continue;
        }
        if let Some(abs) = m.path.under(root) {
            files.push((i, abs));
        }
    }
    if files.is_empty() {
        return Ok(());
    }
    let cmd = Command::builder(["sh", "-c", CONTEXT_SCRIPT, "execseam-grep-context"])
        .args(files.iter().map(|f| f.1.clone()))
        .tool(Tool::READ)
        .env(native::ENV.0, native::ENV.1)
        .build()?;
    let out = tools.run(cmd).await?;
    if !out.exit.success() {
        return Err(crate::failed(&Tool::GREP, &out));
    }
    let provider = tools.exec().provider();
    let bad = |m: &str| ToolError::protocol(provider, &Tool::GREP, format!("grep context: {m}"));
    let mut rest: &[u8] = &out.stdout;
    for (first, _) in &files {
        let nl = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| bad("the output ends inside a size line"))?;
        let head = &rest[..nl];
        rest = &rest[nl + 1..];
        if head == b"x" {
            continue; // gone since the search: no context
        }
        let n: usize = std::str::from_utf8(head)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| bad("a malformed size line"))?;
        if rest.len() < n {
            return Err(bad(
                "a file's content is shorter than its size (changed while read?)",
            ));
        }
        let content = out.stdout.slice_ref(&rest[..n]);
        rest = &rest[n..];
        let lines = split(&content);
        let path = items[*first].path.clone();
        for m in items[*first..].iter_mut().take_while(|m| m.path == path) {
            let at = usize::try_from(m.line)
                .unwrap_or(usize::MAX)
                .saturating_sub(1);
            let lo = at.saturating_sub(before).min(lines.len());
            m.before = lines[lo..at.min(lines.len())].to_vec();
            let hi = at.saturating_add(1).saturating_add(after).min(lines.len());
            m.after = lines[(at + 1).min(hi)..hi].to_vec();
        }
    }
    if !rest.is_empty() {
        return Err(bad("output after the last file"));
    }
    Ok(())
}

/// The lines of `content` without their `\n` (a last line without one counts).
fn split(content: &Bytes) -> Vec<Bytes> {
    let mut v: Vec<Bytes> = content
        .split(|&b| b == b'\n')
        .map(|l| content.slice_ref(l))
        .collect();
    if content.ends_with(b"\n") || content.is_empty() {
        v.pop();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines() {
        let s = |c: &'static [u8]| split(&Bytes::from_static(c));
        assert_eq!(s(b""), Vec::<Bytes>::new());
        assert_eq!(s(b"a\nb\n"), vec!["a", "b"]);
        assert_eq!(s(b"a\n\nb"), vec!["a", "", "b"]);
    }
}
