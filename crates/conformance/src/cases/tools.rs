//! The builtin tools (`execseam-tools`) through the adapter: byte-exact snapshots of every tool on
//! one fixture tree (the same files for every adapter), typed errors, and the hostile-order proof:
//! records shuffled and output cut into random chunks change nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use execseam_core::{Command, Delivery, Exec, Tool};
use execseam_tools::{
    Entry, GrepOptions, Listing, Match, ReadRange, RelPath, ToolError, Tools, WriteOptions, escape,
};
use proptest::prelude::*;

use super::{fail, na, render, run_ok, same};
use crate::hostile::{Hostile, Replay};
use crate::{CaseResult, Outcome, Target, property, snapshot};

// ---------------------------------------------------------------------------------------------
// Building trees in the sandbox.

/// Bytes as a `printf` format that prints exactly them (octal escapes for anything not plain);
/// the script puts `%s` (with an empty argument) in front, so a leading `-` is never an option.
fn printf_format(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'%' => s.push_str("%%"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\{c:03o}");
            }
        }
    }
    s
}

/// What to create: directories and files by relative path (raw bytes), in order.
#[derive(Clone, Debug, Default)]
struct Plan(Vec<(Vec<u8>, Option<Vec<u8>>)>);

impl Plan {
    fn dir(&mut self, p: impl AsRef<[u8]>) -> &mut Plan {
        self.0.push((p.as_ref().to_vec(), None));
        self
    }
    fn file(&mut self, p: impl AsRef<[u8]>, content: impl AsRef<[u8]>) -> &mut Plan {
        self.0
            .push((p.as_ref().to_vec(), Some(content.as_ref().to_vec())));
        self
    }
}

const CREATE: &str = r#"set -e
root=$1; shift
rm -rf "$root"; mkdir -p "$root"; cd "$root"
while [ $# -gt 0 ]; do
  p=$(printf "%s$2" ""; printf x); p=${p%x}
  case $1 in
  d) mkdir -p -- "$p"; shift 2;;
  f) printf "%s$3" "" > "$p"; shift 3;;
  *) exit 9;;
  esac
done"#;

/// Recreates `root` (absolute) with exactly the plan's entries.
async fn create(t: &Target, root: &str, plan: &Plan) -> Result<(), Outcome> {
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        CREATE.into(),
        "sh".into(),
        root.into(),
    ];
    for (p, content) in &plan.0 {
        match content {
            None => argv.extend(["d".into(), printf_format(p)]),
            Some(c) => argv.extend(["f".into(), printf_format(p), printf_format(c)]),
        }
    }
    let o = run_ok(t, Command::new(argv).expect("valid")).await?;
    if !o.exit.success() {
        return fail(format!("creating the tree {root} failed: {}", render(&o)));
    }
    Ok(())
}

async fn remove(t: &Target, root: &str) {
    let _ = t
        .exec
        .exec(Command::new(["rm", "-rf", "--", root]).expect("valid"))
        .await;
}

/// The fixture every snapshot is taken on: UTF-8 names only (the non-UTF-8 case has its own).
fn fixture_plan() -> Plan {
    let mut p = Plan::default();
    p.dir("src/nested/deep")
        .dir("docs/empty")
        .dir(".hidden")
        .file("README.md", "# Fixture\nA needle in the readme.\n")
        .file("src/main.rs", "fn main() {\n    println!(\"needle\");\n}\n")
        .file("src/lib.rs", "pub fn f() {}\n// NEEDLE in upper case\n")
        .file("src/nested/deep/x.rs", "needle at depth\n")
        .file("docs/guide.md", "line one\nneedle two\nline three")
        .file("sp ace.txt", "needle with a space\n")
        .file("quo'te\"s.txt", "no match here\n")
        .file("new\nline.txt", "needle after a newline name\n")
        .file("-dash.txt", "-needle\n")
        .file("é-unicode.txt", "needle é\n")
        .file("Zed.txt", "needle Z\n")
        .file(".hidden/h.txt", "needle hidden\n")
        .file("bin.dat", b"needle\0binary\nneedle text\n")
        .file("crlf.txt", "needle crlf\r\nsecond\r\n")
        .file("a[1].txt", "needle bracket\n")
        .file("🦀.rs", "// needle crab\n");
    p
}

async fn fixture(t: &Target) -> Result<String, Outcome> {
    let root = t.path("tools-fixture");
    create(t, &root, &fixture_plan()).await?;
    Ok(root)
}

// ---------------------------------------------------------------------------------------------
// Rendering (what the snapshots hold).

fn header<T>(what: &str, l: &Listing<T>) -> String {
    format!(
        "{what}: {} items, {} omitted, {} skipped\n",
        l.items.len(),
        l.omitted,
        l.skipped.len()
    )
}

fn render_paths(what: &str, l: &Listing<RelPath>) -> String {
    let mut s = header(what, l);
    for p in &l.items {
        let _ = writeln!(s, "  {p}");
    }
    s
}

fn render_entries(what: &str, l: &Listing<Entry>) -> String {
    let mut s = header(what, l);
    for e in &l.items {
        let _ = writeln!(s, "  {}{}", e.path, if e.is_dir { "/" } else { "" });
    }
    s
}

fn render_matches(what: &str, l: &Listing<Match>) -> String {
    let mut s = header(what, l);
    for m in &l.items {
        let _ = writeln!(s, "  {}:{}: {}", m.path, m.line, escape(&m.text));
    }
    s
}

fn tool_err(what: &str, e: ToolError) -> Outcome {
    Outcome::Fail(format!("{what}: {e}"))
}

/// The glob cases of the snapshot: (pattern, limit).
const GLOBS: &[(&str, usize)] = &[
    ("**", 1000),
    ("**", 3),
    ("**/*.rs", 1000),
    ("src/**", 1000),
    ("*.txt", 1000),
    ("{docs,src}/*.{md,rs}", 1000),
    ("a\\[1\\].txt", 1000),
    ("[!-.a-z]*", 1000),
    ("?ed.txt", 1000),
    ("no/such/dir/*", 1000),
];

async fn glob_text(tools: &Tools<'_>, root: &str) -> Result<String, Outcome> {
    let mut s = String::new();
    for &(pattern, limit) in GLOBS {
        let l = tools
            .glob(root, pattern, limit)
            .await
            .map_err(|e| tool_err(&format!("glob {pattern:?}"), e))?;
        s.push_str(&render_paths(
            &format!("glob {pattern:?} limit {limit}"),
            &l,
        ));
    }
    Ok(s)
}

const LISTS: &[(&str, Option<u32>, usize)] = &[
    ("", Some(1), 1000),
    ("", Some(2), 1000),
    ("", None, 1000),
    ("", None, 4),
    ("src", Some(1), 1000),
    ("docs/empty", None, 1000),
];

async fn list_text(tools: &Tools<'_>, root: &str) -> Result<String, Outcome> {
    let mut s = String::new();
    for &(sub, depth, limit) in LISTS {
        let dir = if sub.is_empty() {
            root.to_owned()
        } else {
            format!("{root}/{sub}")
        };
        let l = tools
            .list(&dir, depth, limit)
            .await
            .map_err(|e| tool_err(&format!("list {sub:?}"), e))?;
        s.push_str(&render_entries(
            &format!("list {sub:?} depth {depth:?} limit {limit}"),
            &l,
        ));
    }
    Ok(s)
}

fn greps() -> Vec<(&'static str, GrepOptions, usize)> {
    let opts = |glob: Option<&str>, fixed, ignore_case| GrepOptions {
        glob: glob.map(Into::into),
        fixed,
        ignore_case,
        ..GrepOptions::default()
    };
    vec![
        ("needle", opts(None, false, false), 1000),
        ("needle", opts(None, false, false), 2),
        ("NEEDLE", opts(Some("*.rs"), false, true), 1000),
        ("^needle [a-zé]+$", opts(None, false, false), 1000),
        ("println!(", opts(None, true, false), 1000),
        ("needle|line", opts(Some("docs/*"), false, false), 1000),
        ("no such text", opts(None, false, false), 1000),
    ]
}

async fn grep_text(tools: &Tools<'_>, root: &str) -> Result<String, Outcome> {
    let mut s = String::new();
    for (re, o, limit) in greps() {
        let l = tools
            .grep(root, re, &o, limit)
            .await
            .map_err(|e| tool_err(&format!("grep {re:?}"), e))?;
        let what = format!(
            "grep {re:?} glob {:?} fixed {} ignore_case {} limit {limit}",
            o.glob, o.fixed, o.ignore_case
        );
        s.push_str(&render_matches(&what, &l));
    }
    Ok(s)
}

const READS: &[(&str, ReadRange)] = &[
    ("docs/guide.md", ReadRange::All),
    (
        "docs/guide.md",
        ReadRange::Lines {
            first: 2,
            count: Some(1),
        },
    ),
    (
        "docs/guide.md",
        ReadRange::Lines {
            first: 2,
            count: None,
        },
    ),
    (
        "docs/guide.md",
        ReadRange::Lines {
            first: 9,
            count: None,
        },
    ),
    (
        "docs/guide.md",
        ReadRange::Bytes {
            offset: 5,
            len: Some(8),
        },
    ),
    (
        "docs/guide.md",
        ReadRange::Bytes {
            offset: 30,
            len: None,
        },
    ),
    ("bin.dat", ReadRange::All),
    (
        "crlf.txt",
        ReadRange::Lines {
            first: 1,
            count: Some(1),
        },
    ),
    ("new\nline.txt", ReadRange::All),
];

async fn read_text(tools: &Tools<'_>, root: &str) -> Result<String, Outcome> {
    let mut s = String::new();
    for (p, range) in READS {
        let b = tools
            .read(&format!("{root}/{p}"), *range)
            .await
            .map_err(|e| tool_err(&format!("read {p:?}"), e))?;
        let _ = writeln!(s, "read {:?} {range:?}: {}", p, super::show(&b));
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------------
// Snapshot cases.

pub(crate) async fn glob(t: &Target) -> CaseResult {
    let root = fixture(t).await?;
    let text = glob_text(&Tools::new(&*t.exec), &root).await?;
    snapshot::check("tools-glob", &text)
}

pub(crate) async fn list(t: &Target) -> CaseResult {
    let root = fixture(t).await?;
    let text = list_text(&Tools::new(&*t.exec), &root).await?;
    snapshot::check("tools-list", &text)
}

pub(crate) async fn grep(t: &Target) -> CaseResult {
    let root = fixture(t).await?;
    let text = grep_text(&Tools::new(&*t.exec), &root).await?;
    snapshot::check("tools-grep", &text)
}

pub(crate) async fn read(t: &Target) -> CaseResult {
    let root = fixture(t).await?;
    let text = read_text(&Tools::new(&*t.exec), &root).await?;
    snapshot::check("tools-read", &text)
}

pub(crate) async fn bash(t: &Target) -> CaseResult {
    let tools = Tools::new(&*t.exec);
    let o = tools
        .bash(
            "printf 'out %s' \"$((6 * 7))\"; printf err >&2; exit 3",
            None,
        )
        .await
        .map_err(|e| tool_err("bash", e))?;
    let mut text = render(&o);
    let dir = t.path("tools-bash");
    run_ok(t, Command::new(["mkdir", "-p", "--", &dir]).expect("valid")).await?;
    let o = tools
        .bash("pwd -P", Some(&dir))
        .await
        .map_err(|e| tool_err("bash in a workdir", e))?;
    same(
        "pwd -P through bash",
        &o.stdout,
        format!("{dir}\n").as_bytes(),
    )?;
    let killed = tools.bash("kill -9 $$", None).await;
    if t.signal_deaths_unnamed.is_some() {
        // The provider does not name a signal death: an error, never an exit.
        if let Ok(o) = killed {
            return fail(format!(
                "bash `kill -9 $$`: a signal death the provider does not name became {:?}",
                o.exit
            ));
        }
        text.push('\n');
        return snapshot::check("tools-bash", &text);
    }
    let o = killed.map_err(|e| tool_err("bash kill", e))?;
    if !o.exit.is_ambiguous_kill() {
        return fail(format!(
            "bash `kill -9 $$`: {:?} is not an ambiguous kill",
            o.exit
        ));
    }
    text.push('\n');
    snapshot::check("tools-bash", &text)
}

fn stdin_gate(t: &Target) -> CaseResult {
    if t.exec.capabilities().stdin == Delivery::Unsupported {
        return na(
            "capabilities.stdin = Unsupported (write and apply_patch feed file contents through stdin)",
        );
    }
    Ok(())
}

/// A listing of `dir` with every entry, hidden ones (temporary files) included, each rendered
/// losslessly (escaped), directories with a trailing `/`.
async fn names(tools: &Tools<'_>, dir: &str) -> Result<Vec<String>, Outcome> {
    let l = tools
        .list(dir, None, usize::MAX)
        .await
        .map_err(|e| tool_err("list", e))?;
    Ok(l.items
        .iter()
        .map(|e| format!("{}{}", e.path, if e.is_dir { "/" } else { "" }))
        .collect())
}

pub(crate) async fn write(t: &Target) -> CaseResult {
    stdin_gate(t)?;
    let tools = Tools::new(&*t.exec);
    let dir = t.path("tools-write");
    create(
        t,
        &dir,
        Plan::default().file("exec.sh", "#!/bin/sh\necho old\n"),
    )
    .await?;
    let caps = t.exec.capabilities();
    // 70 000 bytes, or as much as the adapter's stdin takes; every byte value, also where the
    // adapter's output is text (`binary_output: false`): the read must carry them exactly or
    // fail typed, never corrupt them (issue 38: U+FFFD with Ok through Vercel).
    let size = caps.max_stdin.map_or(70_000, |m| (m as usize).min(70_000));
    let content: Vec<u8> = (0..=255u8).cycle().take(size).collect();
    let file = format!("{dir}/new file.bin");
    tools
        .write(&file, content.clone())
        .await
        .map_err(|e| tool_err("write a new file", e))?;
    let back = tools
        .read(&file, ReadRange::All)
        .await
        .map_err(|e| tool_err("read it back", e))?;
    same("written then read", &back, &content)?;
    // Overwriting keeps the mode (an executable stays executable) and the content is replaced.
    run_ok(
        t,
        Command::new(["chmod", "755", &format!("{dir}/exec.sh")]).expect("valid"),
    )
    .await?;
    tools
        .write(&format!("{dir}/exec.sh"), "#!/bin/sh\necho new\n")
        .await
        .map_err(|e| tool_err("overwrite", e))?;
    let o = run_ok(t, Command::new([format!("{dir}/exec.sh")]).expect("valid")).await?;
    same(
        "the overwritten script runs (mode kept)",
        &o.stdout,
        b"new\n",
    )?;
    // Empty content, and parents created on request.
    tools
        .write(&format!("{dir}/empty"), "")
        .await
        .map_err(|e| tool_err("write empty", e))?;
    tools
        .write(&format!("{dir}/a/b/c.txt"), "deep\n")
        .await
        .map_err(|e| tool_err("write creating missing parents (the default)", e))?;
    let got = names(&tools, &dir).await?;
    let want = [
        "a/",
        "a/b/",
        "a/b/c.txt",
        "empty",
        "exec.sh",
        "new file.bin",
    ];
    if got != want {
        return fail(format!(
            "after the writes the directory holds {got:?}, want {want:?} (no temporary file left)"
        ));
    }
    let e = tools.read(&format!("{dir}/empty"), ReadRange::All).await;
    match e {
        Ok(b) if b.is_empty() => Ok(()),
        other => fail(format!("the empty file reads as {other:?}")),
    }
}

const PATCH: &str = "diff --git a/src/lib.rs b/src/lib.rs
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,2 +1,3 @@
 pub fn f() {}
-// NEEDLE in upper case
+// patched
+pub fn g() {}
--- /dev/null
+++ b/new/dir/created.txt
@@ -0,0 +1,2 @@
+created
+by the patch
--- a/docs/guide.md
+++ b/docs/guide.md
@@ -2,2 +2,2 @@
 needle two
-line three
\\ No newline at end of file
+line three, now with a newline
--- a/Zed.txt
+++ /dev/null
@@ -1 +0,0 @@
-needle Z
";

pub(crate) async fn apply_patch(t: &Target) -> CaseResult {
    stdin_gate(t)?;
    let root = fixture(t).await?;
    let tools = Tools::new(&*t.exec);
    let before = names(&tools, &root).await?;
    // A conflict in the last file: nothing at all is written.
    let bad = PATCH.replace("-needle Z\n", "-needle Y\n");
    match tools.apply_patch(&root, &bad).await {
        Err(ToolError::PatchConflict { path, hunk: 1, .. })
            if path == format!("{root}/Zed.txt") => {}
        other => return fail(format!("a hunk that does not apply: got {other:?}")),
    }
    let after_conflict = names(&tools, &root).await?;
    if after_conflict != before {
        return fail(format!(
            "a failed patch changed the tree:\n{}",
            super::diff(&before.join("\n"), &after_conflict.join("\n"))
        ));
    }
    let lib = tools
        .read(&format!("{root}/src/lib.rs"), ReadRange::All)
        .await
        .map_err(|e| tool_err("read", e))?;
    same(
        "src/lib.rs after a failed patch",
        &lib,
        b"pub fn f() {}\n// NEEDLE in upper case\n",
    )?;
    // A creation over an existing file.
    let exists = "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+x\n";
    match tools.apply_patch(&root, exists).await {
        Err(ToolError::AlreadyExists { .. }) => {}
        other => return fail(format!("creating an existing file: got {other:?}")),
    }
    // The good patch.
    let report = tools
        .apply_patch(&root, PATCH)
        .await
        .map_err(|e| tool_err("apply_patch", e))?;
    let mut text = String::from("report:\n");
    for f in &report {
        let _ = writeln!(text, "  {} {:?}", f.path, f.change);
    }
    let after = names(&tools, &root).await?;
    text.push_str("tree:\n");
    for n in &after {
        let _ = writeln!(text, "  {n}");
    }
    for p in ["src/lib.rs", "new/dir/created.txt", "docs/guide.md"] {
        let b = tools
            .read(&format!("{root}/{p}"), ReadRange::All)
            .await
            .map_err(|e| tool_err(&format!("read {p}"), e))?;
        let _ = writeln!(text, "{p}: {}", super::show(&b));
    }
    snapshot::check("tools-apply-patch", &text)
}

/// A root with `link -> OUTSIDE` (a directory symlink pointing out of it) and a file outside.
const LINKED: &str = r#"set -e
rm -rf "$1" "$2"; mkdir -p "$1/sub" "$2"
printf 'outside y\n' > "$2/y"; printf 'one\n' > "$1/sub/ok.txt"
ln -s "$2" "$1/link"; ln -s "$2/y" "$1/leaf""#;

/// `apply_patch` never leaves its root through a symlink (issue 38: a patch adding `link/pwn`
/// wrote `/etc/pwn-patch3` through `execseam mcp`).
pub(crate) async fn apply_patch_symlink(t: &Target) -> CaseResult {
    stdin_gate(t)?;
    let root = t.path("tools-patch-root");
    let outside = t.path("tools-patch-outside");
    let o = run_ok(
        t,
        Command::new(["sh", "-c", LINKED, "sh", &root, &outside]).expect("valid"),
    )
    .await?;
    if !o.exit.success() {
        return fail(format!("creating the linked tree failed: {}", render(&o)));
    }
    let tools = Tools::new(&*t.exec);
    for patch in [
        "*** Begin Patch\n*** Add File: link/pwn\n+pwned\n*** End Patch\n",
        "--- /dev/null\n+++ b/link/pwn\n@@ -0,0 +1 @@\n+pwned\n",
        "*** Begin Patch\n*** Update File: link/y\n@@\n-outside y\n+changed\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: leaf\n@@\n-outside y\n+changed\n*** End Patch\n",
    ] {
        match tools.apply_patch(&root, patch).await {
            Err(ToolError::OutsideRoot { .. }) => {}
            other => {
                remove(t, &root).await;
                remove(t, &outside).await;
                return fail(format!("{patch:?} through a symlink: got {other:?}"));
            }
        }
    }
    let left = names(&tools, &outside).await?;
    let y = tools
        .read(&format!("{outside}/y"), ReadRange::All)
        .await
        .map_err(|e| tool_err("read outside/y", e))?;
    let ok = tools
        .apply_patch(
            &root,
            "*** Begin Patch\n*** Add File: sub/new.txt\n+new\n*** End Patch\n",
        )
        .await;
    remove(t, &root).await;
    remove(t, &outside).await;
    if left != ["y"] {
        return fail(format!("written outside the root: {left:?}"));
    }
    same("the file outside", &y, b"outside y\n")?;
    ok.map_err(|e| tool_err("a patch inside the root", e))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// edit, and apply_patch in the `*** Begin Patch` format.

/// Every file below `root` (names as `names` gives them) with its exact bytes, for "nothing
/// changed" checks and snapshots.
async fn tree_state(
    tools: &Tools<'_>,
    root: &str,
) -> Result<Vec<(String, Option<Vec<u8>>)>, Outcome> {
    let l = tools
        .list(root, None, usize::MAX)
        .await
        .map_err(|e| tool_err("list", e))?;
    let mut out = Vec::new();
    for e in &l.items {
        let shown = format!("{}{}", e.path, if e.is_dir { "/" } else { "" });
        if e.is_dir {
            out.push((shown, None));
            continue;
        }
        let rel = e
            .path
            .as_str()
            .ok_or_else(|| Outcome::Fail(format!("{} is not UTF-8", e.path)))?;
        let b = tools
            .read(&format!("{root}/{rel}"), ReadRange::All)
            .await
            .map_err(|e| tool_err(&format!("read {rel}"), e))?;
        out.push((shown, Some(b.to_vec())));
    }
    Ok(out)
}

fn render_state(state: &[(String, Option<Vec<u8>>)]) -> String {
    let mut s = String::new();
    for (name, content) in state {
        match content {
            None => {
                let _ = writeln!(s, "  {name}");
            }
            Some(b) => {
                let _ = writeln!(s, "  {name}: {}", super::show(b));
            }
        }
    }
    s
}

/// Every entry below `root` and every file's bytes, in one command (not the tools: a list and
/// a read per file cost a round trip each, on Docker per call a container each), as
/// [`tree_state`] shows them, by name. Names must not hold a newline.
const DUMP: &str = r#"cd "$1" || exit 9
exec find . -mindepth 1 -exec sh -c 'for p do if [ -d "$p" ]; then printf "d\n%s\n" "$p"; else printf "f\n%s\n%s\n" "$p" "$(wc -c < "$p")"; cat -- "$p"; fi; done' sh {} +"#;

async fn dump(t: &Target, root: &str) -> Result<Vec<(String, Option<Vec<u8>>)>, Outcome> {
    let o = run_ok(
        t,
        Command::new(["sh", "-c", DUMP, "sh", root]).expect("valid"),
    )
    .await?;
    if !o.exit.success() {
        return fail(format!("dumping the tree {root} failed: {}", render(&o)));
    }
    let bad = || Outcome::Fail(format!("an unreadable dump of {root}: {}", render(&o)));
    let b: &[u8] = &o.stdout;
    let mut at = 0;
    let line = |at: &mut usize| -> Result<String, Outcome> {
        let n = b[*at..].iter().position(|&c| c == b'\n').ok_or_else(bad)?;
        let l = String::from_utf8(b[*at..*at + n].to_vec()).map_err(|_| bad())?;
        *at += n + 1;
        Ok(l)
    };
    let mut out = Vec::new();
    while at < b.len() {
        let kind = line(&mut at)?;
        let path = line(&mut at)?;
        let path = path.strip_prefix("./").ok_or_else(bad)?.to_owned();
        if kind == "d" {
            out.push((format!("{path}/"), None));
            continue;
        }
        let size: usize = line(&mut at)?.trim().parse().map_err(|_| bad())?;
        let content = b.get(at..at + size).ok_or_else(bad)?.to_vec();
        at += size;
        out.push((path, Some(content)));
    }
    out.sort();
    Ok(out)
}

/// The tree below `root` as a [`dump`], checked once against what the tools see (so a dump
/// that misses an entry or a byte cannot make [`unchanged`] pass).
async fn dump_as_tools_see_it(
    t: &Target,
    tools: &Tools<'_>,
    root: &str,
) -> Result<Vec<(String, Option<Vec<u8>>)>, Outcome> {
    let dumped = dump(t, root).await?;
    let mut seen = tree_state(tools, root).await?;
    seen.sort();
    if dumped != seen {
        return fail(format!(
            "the one-command dump of {root} differs from the tools' list and reads:\n{}",
            super::diff(&render_state(&seen), &render_state(&dumped))
        ));
    }
    Ok(dumped)
}

/// Requires the tree below `root` to be exactly `before` (a [`dump`]: names and bytes).
async fn unchanged(
    t: &Target,
    root: &str,
    before: &[(String, Option<Vec<u8>>)],
    what: &str,
) -> CaseResult {
    let after = dump(t, root).await?;
    if after != before {
        return fail(format!(
            "{what} changed the tree (nothing may be written):\n{}",
            super::diff(&render_state(before), &render_state(&after))
        ));
    }
    Ok(())
}

/// A typed tool error as the snapshots show it: its code and its path relative to `root`.
fn render_tool_err(root: &str, e: &ToolError) -> String {
    let rel = |p: &str| {
        p.strip_prefix(root)
            .map(|r| r.trim_start_matches('/').to_owned())
            .unwrap_or_else(|| p.to_owned())
    };
    match e {
        ToolError::NotUnique { path, count } => {
            format!("not-unique {} (count {count})", rel(path))
        }
        ToolError::PatchConflict { path, hunk, .. } => {
            format!("patch-conflict {} (hunk {hunk})", rel(path))
        }
        ToolError::InvalidArgument { .. } | ToolError::InvalidPatch { .. } => e.code().to_owned(),
        e => format!("{} {}", e.code(), e.path().map(rel).unwrap_or_default()),
    }
}

/// The files `edit` works on: CRLF line endings and no final newline kept exactly.
fn edit_plan() -> Plan {
    let mut p = Plan::default();
    p.file("crlf.txt", "alpha\r\nbeta\r\ngamma")
        .file("dup.txt", "x = 1\ny = 2\nx = 1\n")
        .file("tool.sh", "#!/bin/sh\necho old\n")
        .file("same.txt", "untouched\n");
    p
}

pub(crate) async fn edit(t: &Target) -> CaseResult {
    stdin_gate(t)?;
    let tools = Tools::new(&*t.exec);
    let root = t.path("tools-edit");
    create(t, &root, &edit_plan()).await?;
    run_ok(
        t,
        Command::new(["chmod", "755", &format!("{root}/tool.sh")]).expect("valid"),
    )
    .await?;
    let f = |p: &str| format!("{root}/{p}");
    let mut text = String::new();
    // Failures first: each is typed, and nothing at all is written.
    let before = dump_as_tools_see_it(t, &tools, &root).await?;
    let failing: [(&str, &str, &str, &str, bool); 5] = [
        ("absent", "crlf.txt", "delta", "D", false),
        ("not unique", "dup.txt", "x = 1", "x = 9", false),
        ("missing file", "no such.txt", "a", "b", false),
        ("missing file, replace_all", "no such.txt", "a", "b", true),
        ("empty old", "same.txt", "", "x", false),
    ];
    for (what, p, old, new, all) in failing {
        match tools.edit(&f(p), old, new, all).await {
            Ok(n) => {
                return fail(format!(
                    "edit ({what}): got Ok({n}) instead of a typed error"
                ));
            }
            Err(e) => {
                let want = match what {
                    "absent" => matches!(&e, ToolError::NoMatch { path } if *path == f(p)),
                    "not unique" => {
                        matches!(&e, ToolError::NotUnique { path, count: 2 } if *path == f(p))
                    }
                    "empty old" => matches!(e, ToolError::InvalidArgument { .. }),
                    _ => matches!(&e, ToolError::NotFound { path } if *path == f(p)),
                };
                if !want {
                    return fail(format!("edit ({what}): wrong error {:?}: {e}", e.code()));
                }
                let _ = writeln!(text, "edit {p} ({what}): {}", render_tool_err(&root, &e));
            }
        }
        unchanged(t, &root, &before, &format!("a failed edit ({what})")).await?;
    }
    // Successes: the exact bytes around the replacement are kept (CRLF, no final newline).
    let ok: [(&str, &str, &str, bool); 5] = [
        ("crlf.txt", "beta", "BETA\r\nbeta two", false),
        (
            "crlf.txt",
            "\r\ngamma",
            "\r\ngamma, still no newline",
            false,
        ),
        ("dup.txt", "x = 1", "x = 9", true),
        ("dup.txt", "y = 2\n", "", false),
        ("tool.sh", "echo old", "echo edited", false),
    ];
    for (p, old, new, all) in ok {
        let n = tools
            .edit(&f(p), old, new, all)
            .await
            .map_err(|e| tool_err(&format!("edit {p} {old:?}"), e))?;
        let _ = writeln!(
            text,
            "edit {p} {} -> {} (replace_all {all}): {n} replaced",
            super::show(old.as_bytes()),
            super::show(new.as_bytes())
        );
    }
    // The edited script still runs: the mode is kept, as `write` keeps it.
    let o = run_ok(t, Command::new([f("tool.sh")]).expect("valid")).await?;
    same("the edited script runs (mode kept)", &o.stdout, b"edited\n")?;
    text.push_str("tree:\n");
    text.push_str(&render_state(&tree_state(&tools, &root).await?));
    remove(t, &root).await;
    snapshot::check("tools-edit", &text)
}

/// The tree the `*** Begin Patch` case patches.
fn envelope_plan() -> Plan {
    let mut p = Plan::default();
    p.dir("src")
        .dir("old")
        .file("keep.txt", "unchanged\n")
        .file(
            "src/app.py",
            "def a():\n    return 1\n\ndef b():\n    return 1\n",
        )
        .file("old/name.txt", "moved content\nline two\n")
        .file("gone.txt", "delete me\n")
        .file("crlf.txt", "one\r\ntwo\r\nthree\r\n")
        .file("no-newline.txt", "first\nlast");
    p
}

/// Adds, updates (one with an `@@` line picking the second of two equal blocks, one on a CRLF
/// file, one on a file without a final newline), moves and deletes, in one patch.
const ENVELOPE: &str = "*** Begin Patch
*** Add File: added/deep/new.md
+# New
+
+made by the patch
*** Update File: src/app.py
@@ def b():
-    return 1
+    return 2
*** Update File: old/name.txt
*** Move to: new/place/name.txt
 moved content
-line two
+line two, moved
*** Delete File: gone.txt
*** Update File: crlf.txt
 one
-two
+TWO
 three
*** Update File: no-newline.txt
 first
-last
+last, edited
*** End of File
*** End Patch
";

pub(crate) async fn apply_patch_envelope(t: &Target) -> CaseResult {
    stdin_gate(t)?;
    let tools = Tools::new(&*t.exec);
    let root = t.path("tools-envelope");
    create(t, &root, &envelope_plan()).await?;
    let before = dump_as_tools_see_it(t, &tools, &root).await?;
    let mut text = String::new();
    // Each of these fails in its last file section, after earlier sections applied in memory:
    // a typed error, and nothing at all is written.
    let failing: [(&str, String); 5] = [
        (
            "a chunk that is not in the file",
            ENVELOPE.replace(
                "+last, edited\n",
                "+last, edited\n@@\n-not in the file\n+x\n",
            ),
        ),
        (
            "an add over an existing file",
            ENVELOPE.replace("*** End Patch", "*** Add File: keep.txt\n+x\n*** End Patch"),
        ),
        (
            "a delete of a missing file",
            ENVELOPE.replace(
                "*** End Patch",
                "*** Delete File: no such.txt\n*** End Patch",
            ),
        ),
        (
            "a move onto an existing file",
            ENVELOPE.replace(
                "*** End Patch",
                "*** Update File: keep.txt\n*** Move to: src/app.py\n-unchanged\n+x\n*** End Patch",
            ),
        ),
        (
            "an update of a missing file",
            ENVELOPE.replace(
                "*** End Patch",
                "*** Update File: no such.txt\n-a\n+b\n*** End Patch",
            ),
        ),
    ];
    for (what, patch) in &failing {
        match tools.apply_patch(&root, patch).await {
            Ok(r) => return fail(format!("{what}: got Ok({r:?}) instead of a typed error")),
            Err(e) => {
                let want = match *what {
                    "a chunk that is not in the file" => matches!(
                        &e,
                        ToolError::PatchConflict { path, hunk: 2, .. }
                            if *path == format!("{root}/no-newline.txt")
                    ),
                    "an add over an existing file" | "a move onto an existing file" => {
                        matches!(e, ToolError::AlreadyExists { .. })
                    }
                    _ => matches!(e, ToolError::NotFound { .. }),
                };
                if !want {
                    return fail(format!("{what}: wrong error {:?}: {e}", e.code()));
                }
                let _ = writeln!(text, "{what}: {}", render_tool_err(&root, &e));
            }
        }
        unchanged(t, &root, &before, &format!("a failed patch ({what})")).await?;
    }
    let report = tools
        .apply_patch(&root, ENVELOPE)
        .await
        .map_err(|e| tool_err("apply_patch (*** Begin Patch)", e))?;
    text.push_str("report:\n");
    for f in &report {
        let _ = writeln!(text, "  {} {:?}", f.path, f.change);
    }
    text.push_str("tree:\n");
    text.push_str(&render_state(&tree_state(&tools, &root).await?));
    remove(t, &root).await;
    snapshot::check("tools-apply-patch-envelope", &text)
}

// ---------------------------------------------------------------------------------------------
// Errors.

fn expect_tool_err<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, ToolError>,
    ok: impl Fn(&ToolError) -> bool,
) -> CaseResult {
    match r {
        Err(e) if ok(&e) => Ok(()),
        Err(e) => fail(format!("{what}: wrong error {:?}: {e}", e.code())),
        Ok(v) => fail(format!("{what}: got Ok({v:?}) instead of a typed error")),
    }
}

pub(crate) async fn errors(t: &Target) -> CaseResult {
    let root = fixture(t).await?;
    let tools = Tools::new(&*t.exec);
    let before = names(&tools, &root).await?;
    let missing = format!("{root}/no such file");
    let is = |p: &str| {
        let p = p.to_owned();
        move |e: &ToolError| e.path() == Some(p.as_str())
    };
    expect_tool_err(
        "read a missing file",
        tools.read(&missing, ReadRange::All).await,
        |e| matches!(e, ToolError::NotFound { path } if *path == missing),
    )?;
    expect_tool_err(
        "read a directory",
        tools.read(&format!("{root}/src"), ReadRange::All).await,
        |e| matches!(e, ToolError::IsADirectory { .. }) && is(&format!("{root}/src"))(e),
    )?;
    expect_tool_err(
        "read under a file",
        tools
            .read(&format!("{root}/README.md/x"), ReadRange::All)
            .await,
        |e| matches!(e, ToolError::NotFound { .. }),
    )?;
    expect_tool_err(
        "read a relative path",
        tools.read("rel/x", ReadRange::All).await,
        |e| matches!(e, ToolError::InvalidArgument { .. }),
    )?;
    expect_tool_err(
        "list a missing directory",
        tools.list(&missing, None, 10).await,
        |e| matches!(e, ToolError::NotFound { path } if *path == missing),
    )?;
    expect_tool_err(
        "list a file",
        tools.list(&format!("{root}/README.md"), None, 10).await,
        |e| matches!(e, ToolError::NotADirectory { .. }),
    )?;
    expect_tool_err(
        "glob a missing root",
        tools.glob(&missing, "**", 10).await,
        |e| matches!(e, ToolError::NotFound { .. }),
    )?;
    expect_tool_err(
        "glob with a malformed pattern",
        tools.glob(&root, "[ab", 10).await,
        |e| matches!(e, ToolError::InvalidPattern { .. }),
    )?;
    expect_tool_err(
        "grep with an invalid regex",
        tools
            .grep(&root, "needle(", &GrepOptions::default(), 10)
            .await,
        |e| matches!(e, ToolError::InvalidPattern { pattern, message } if pattern == "needle(" && !message.is_empty()),
    )?;
    expect_tool_err(
        "grep a missing root",
        tools.grep(&missing, "x", &GrepOptions::default(), 10).await,
        |e| matches!(e, ToolError::NotFound { .. }),
    )?;
    if t.exec.capabilities().stdin.is_supported() {
        let dir = format!("{root}/no such dir");
        expect_tool_err(
            "write into a missing directory, create_parents off",
            tools
                .write_with(
                    &format!("{dir}/f.txt"),
                    "x",
                    WriteOptions {
                        create_parents: false,
                    },
                )
                .await,
            |e| matches!(e, ToolError::NotFound { path } if *path == dir),
        )?;
        expect_tool_err(
            "write over a directory",
            tools.write(&format!("{root}/src"), "x").await,
            |e| matches!(e, ToolError::IsADirectory { .. }),
        )?;
        expect_tool_err(
            "write under a file",
            tools.write(&format!("{root}/README.md/x"), "x").await,
            |e| matches!(e, ToolError::NotADirectory { .. }),
        )?;
    }
    // Nothing above may have left a trace in the fixture.
    let after = names(&tools, &root).await?;
    if after != before {
        return fail(format!(
            "the failed calls changed the fixture:\n{}",
            super::diff(&before.join("\n"), &after.join("\n"))
        ));
    }
    Ok(())
}

async fn uid(t: &Target) -> Result<String, Outcome> {
    let o = run_ok(t, Command::new(["id", "-u"]).expect("valid")).await?;
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

pub(crate) async fn permission_denied(t: &Target) -> CaseResult {
    let id = uid(t).await?;
    if id == "0" {
        return na(
            "the sandbox user is root (uid 0), to whom permission bits do not apply; \
             execseam-tools' tests prove this mapping as an unprivileged user",
        );
    }
    let root = t.path("tools-denied");
    create(
        t,
        &root,
        Plan::default()
            .dir("closed")
            .dir("ro")
            .file("closed/x", "needle\n")
            .file("secret", "needle\n")
            .file("open", "needle\n"),
    )
    .await?;
    let chmod = format!("chmod 000 '{root}/closed' '{root}/secret' && chmod 555 '{root}/ro'");
    run_ok(t, super::sh(&chmod)).await?;
    let tools = Tools::new(&*t.exec);
    let r = async {
        expect_tool_err(
            "read an unreadable file",
            tools.read(&format!("{root}/secret"), ReadRange::All).await,
            |e| matches!(e, ToolError::PermissionDenied { .. }),
        )?;
        expect_tool_err(
            "list an unreadable directory",
            tools.list(&format!("{root}/closed"), None, 10).await,
            |e| matches!(e, ToolError::PermissionDenied { .. }),
        )?;
        expect_tool_err(
            "read below an unsearchable directory",
            tools.read(&format!("{root}/closed/x"), ReadRange::All).await,
            |e| matches!(e, ToolError::PermissionDenied { .. }),
        )?;
        if t.exec.capabilities().stdin.is_supported() {
            expect_tool_err(
                "write into a read-only directory",
                tools.write(&format!("{root}/ro/new"), "x").await,
                |e| matches!(e, ToolError::PermissionDenied { .. }),
            )?;
        }
        // A walk over unreadable parts is a result that says what it skipped.
        let g = tools
            .grep(&root, "needle", &GrepOptions::default(), 100)
            .await
            .map_err(|e| tool_err("grep over unreadable parts", e))?;
        if g.items.len() != 1 || g.skipped.is_empty() {
            return fail(format!(
                "grep over unreadable parts: {} matches, skipped {:?}; want 1 match and the skipped parts named",
                g.items.len(),
                g.skipped
            ));
        }
        Ok(())
    }
    .await;
    let _ = t
        .exec
        .exec(super::sh(&format!(
            "chmod -R u+rwx '{root}'; rm -rf '{root}'"
        )))
        .await;
    r
}

pub(crate) async fn non_utf8_names(t: &Target) -> CaseResult {
    if !t.exec.capabilities().binary_output {
        return na(
            "capabilities.binary_output = false: a name that is not UTF-8 cannot come back through a text transport",
        );
    }
    let root = t.path("tools-bytes");
    create(
        t,
        &root,
        Plan::default()
            .file(b"bad\xffname.txt", b"needle latin\xe9\n")
            .file("ok.txt", "needle\n")
            .dir(b"dir\xfe"),
    )
    .await?;
    let tools = Tools::new(&*t.exec);
    let g = tools
        .glob(&root, "**", 100)
        .await
        .map_err(|e| tool_err("glob", e))?;
    let l = tools
        .list(&root, None, 100)
        .await
        .map_err(|e| tool_err("list", e))?;
    let m = tools
        .grep(&root, "needle", &GrepOptions::default(), 100)
        .await
        .map_err(|e| tool_err("grep", e))?;
    if g.items.first().and_then(RelPath::as_str).is_some() {
        return fail("the non-UTF-8 name came back as UTF-8");
    }
    if g.items.first().map(RelPath::as_bytes) != Some(b"bad\xffname.txt".as_slice()) {
        return fail(format!(
            "the raw bytes of the name were not kept: {:?}",
            g.items
        ));
    }
    let text = format!(
        "{}{}{}",
        render_paths("glob \"**\"", &g),
        render_entries("list", &l),
        render_matches("grep \"needle\"", &m)
    );
    remove(t, &root).await;
    snapshot::check("tools-non-utf8", &text)
}

// ---------------------------------------------------------------------------------------------
// Hostile order.

/// Every snapshot text of the fixture, through `hostile` (streaming or not) and directly, must be
/// byte-identical.
pub(crate) async fn hostile_fixture(t: &Target) -> CaseResult {
    let root = fixture(t).await?;
    // The hostile passes get the backend's answers to the direct pass again, reordered and cut.
    let backend: Arc<dyn Exec> = Arc::new(Replay::new(t.exec.clone()));
    let plain = Tools::new(&*backend);
    let want = [
        glob_text(&plain, &root).await?,
        list_text(&plain, &root).await?,
        grep_text(&plain, &root).await?,
        read_text(&plain, &root).await?,
    ];
    for seed in 1..=4u64 {
        let h = Hostile::new(backend.clone(), seed);
        let tools = Tools::new(&h).streaming(seed % 2 == 0);
        let got = [
            glob_text(&tools, &root).await?,
            list_text(&tools, &root).await?,
            grep_text(&tools, &root).await?,
            read_text(&tools, &root).await?,
        ];
        for (g, w) in got.iter().zip(&want) {
            if g != w {
                return fail(format!(
                    "through the hostile adapter (seed {seed}) the output differs:\n{}",
                    super::diff(w, g)
                ));
            }
        }
    }
    Ok(())
}

/// A random tree: names with spaces, newlines, quotes, unicode, leading dashes, glob characters;
/// deep nesting; empty directories.
#[derive(Clone, Debug)]
enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, Node>),
}

fn name(bytes: bool) -> impl Strategy<Value = Vec<u8>> {
    let mut pieces: Vec<&'static [u8]> = vec![
        b"a",
        b"b",
        b"Z",
        b"needle",
        b" ",
        b"\n",
        b"'",
        b"\"",
        "é".as_bytes(),
        "🦀".as_bytes(),
        b"-",
        b"--",
        b".",
        b"*",
        b"[x]",
        b"\\",
        b"$x",
        b"\t",
        b"0",
        b"~",
    ];
    if bytes {
        pieces.push(b"\xff");
    }
    prop::collection::vec(prop::sample::select(pieces), 1..4)
        .prop_map(|v| v.concat())
        .prop_filter("not . or ..", |n| n != b"." && n != b"..")
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    let line = prop::sample::select(vec![
        &b"needle"[..],
        b"x needle y",
        b"nothing",
        b"",
        b"NEEDLE",
        "é needle".as_bytes(),
        b"needle\r",
    ]);
    (prop::collection::vec(line, 0..5), any::<bool>()).prop_map(|(lines, nl)| {
        let mut c = lines.join(&b'\n');
        if nl && !lines.is_empty() {
            c.push(b'\n');
        }
        c
    })
}

fn tree(bytes: bool) -> impl Strategy<Value = BTreeMap<Vec<u8>, Node>> {
    let leaf = content().prop_map(Node::File);
    let node = leaf.prop_recursive(5, 40, 5, move |inner| {
        prop::collection::btree_map(name(bytes), inner, 0..5).prop_map(Node::Dir)
    });
    prop::collection::btree_map(name(bytes), node, 0..7)
}

/// (path, is_dir, content) of every entry, depth-first.
fn flatten(prefix: &[u8], t: &BTreeMap<Vec<u8>, Node>, out: &mut Vec<(Vec<u8>, Option<Vec<u8>>)>) {
    for (n, node) in t {
        let mut p = prefix.to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(n);
        match node {
            Node::File(c) => out.push((p, Some(c.clone()))),
            Node::Dir(sub) => {
                out.push((p.clone(), None));
                flatten(&p, sub, out);
            }
        }
    }
}

/// What the tools must say about a tree, computed from the tree alone.
struct Oracle {
    entries: Vec<(Vec<u8>, bool)>,
    files: Vec<Vec<u8>>,
    matches: Vec<(Vec<u8>, u64, Vec<u8>)>,
}

fn oracle(flat: &[(Vec<u8>, Option<Vec<u8>>)]) -> Oracle {
    let mut entries: Vec<(Vec<u8>, bool)> =
        flat.iter().map(|(p, c)| (p.clone(), c.is_none())).collect();
    entries.sort();
    let mut files: Vec<Vec<u8>> = flat
        .iter()
        .filter(|(_, c)| c.is_some())
        .map(|(p, _)| p.clone())
        .collect();
    files.sort();
    let mut matches = Vec::new();
    for (p, c) in flat {
        let Some(c) = c else { continue };
        let body = c.strip_suffix(b"\n").unwrap_or(c);
        if c.is_empty() {
            continue;
        }
        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
            if line.windows(6).any(|w| w == b"needle") {
                matches.push((p.clone(), i as u64 + 1, line.to_vec()));
            }
        }
    }
    matches.sort();
    Oracle {
        entries,
        files,
        matches,
    }
}

static TREES: AtomicU64 = AtomicU64::new(0);

async fn check_tree(
    exec: Arc<dyn Exec>,
    scratch: String,
    tree: BTreeMap<Vec<u8>, Node>,
    seed: u64,
    limit: usize,
) -> Result<(), String> {
    let t = Target::new("property", exec.clone()).scratch(scratch);
    let root = t.path(&format!(
        "tools-tree-{}",
        TREES.fetch_add(1, Ordering::Relaxed)
    ));
    let mut flat = Vec::new();
    flatten(b"", &tree, &mut flat);
    let mut plan = Plan::default();
    for (p, c) in &flat {
        match c {
            None => plan.dir(p),
            Some(c) => plan.file(p, c),
        };
    }
    create(&t, &root, &plan).await.map_err(|o| o.to_string())?;
    let r = compare_tree(&exec, &root, &flat, seed, limit).await;
    remove(&t, &root).await;
    r
}

async fn compare_tree(
    exec: &Arc<dyn Exec>,
    root: &str,
    flat: &[(Vec<u8>, Option<Vec<u8>>)],
    seed: u64,
    limit: usize,
) -> Result<(), String> {
    let want = oracle(flat);
    // The hostile pass's listings are the direct pass's answers again, reordered and cut.
    let backend: Arc<dyn Exec> = Arc::new(Replay::new(exec.clone()));
    let hostile = Hostile::new(backend.clone(), seed);
    let plain = Tools::new(&*backend);
    let mean = Tools::new(&hostile).streaming(seed % 2 == 1);
    let e = |what: &str| {
        let what = what.to_owned();
        move |e: ToolError| format!("{what}: {e}")
    };
    for (name, tools) in [("direct", &plain), ("hostile", &mean)] {
        // list: every entry, marked, in byte order, then truncated.
        let l = tools.list(root, None, limit).await.map_err(e("list"))?;
        let got: Vec<(Vec<u8>, bool)> = l
            .items
            .iter()
            .map(|x| (x.path.as_bytes().to_vec(), x.is_dir))
            .collect();
        let keep = want.entries.len().min(limit);
        if got != want.entries[..keep] || l.omitted != want.entries.len() - keep {
            return Err(format!(
                "{name} list (limit {limit}): got {got:?} (+{} omitted), want {:?} (+{})",
                l.omitted,
                &want.entries[..keep],
                want.entries.len() - keep
            ));
        }
        // glob "**": every file.
        let g = tools.glob(root, "**", limit).await.map_err(e("glob"))?;
        let got: Vec<Vec<u8>> = g.items.iter().map(|p| p.as_bytes().to_vec()).collect();
        let keep = want.files.len().min(limit);
        if got != want.files[..keep] || g.omitted != want.files.len() - keep {
            return Err(format!(
                "{name} glob ** (limit {limit}): got {got:?} (+{}), want {:?}",
                g.omitted,
                &want.files[..keep]
            ));
        }
        // grep: every line with "needle", by path then line.
        let m = tools
            .grep(root, "needle", &GrepOptions::default(), limit)
            .await
            .map_err(e("grep"))?;
        let got: Vec<(Vec<u8>, u64, Vec<u8>)> = m
            .items
            .iter()
            .map(|x| (x.path.as_bytes().to_vec(), x.line, x.text.to_vec()))
            .collect();
        let keep = want.matches.len().min(limit);
        if got != want.matches[..keep] || m.omitted != want.matches.len() - keep {
            return Err(format!(
                "{name} grep needle (limit {limit}): got {got:?} (+{}), want {:?}",
                m.omitted,
                &want.matches[..keep]
            ));
        }
    }
    // read: every UTF-8-named file's bytes, through random chunks.
    for (p, c) in flat {
        let (Some(c), Ok(p)) = (c, std::str::from_utf8(p)) else {
            continue;
        };
        let b = mean
            .read(&format!("{root}/{p}"), ReadRange::All)
            .await
            .map_err(e("read"))?;
        if b.as_ref() != c.as_slice() {
            return Err(format!("hostile read {p:?}: {:?}, want {:?}", b, c));
        }
    }
    Ok(())
}

pub(crate) async fn hostile_order(t: &Target) -> CaseResult {
    let bytes = t.exec.capabilities().binary_output;
    let exec = t.exec.clone();
    let scratch = t.scratch.clone();
    property::check(
        t,
        move || (tree(bytes), any::<u64>(), 0usize..40),
        move |(tree, seed, limit)| check_tree(exec.clone(), scratch.clone(), tree, seed, limit),
    )
    .await
}

/// The tools' commands carry their tool, so an adapter can route and count them.
pub(crate) async fn commands_carry_their_tool(t: &Target) -> CaseResult {
    struct Spy {
        inner: Arc<dyn Exec>,
        seen: std::sync::Mutex<Vec<Tool>>,
    }
    impl Exec for Spy {
        fn provider(&self) -> &str {
            self.inner.provider()
        }
        fn capabilities(&self) -> execseam_core::Capabilities {
            self.inner.capabilities()
        }
        fn exec(
            &self,
            command: Command,
        ) -> execseam_core::BoxFuture<'_, Result<execseam_core::Output, execseam_core::Error>>
        {
            self.seen.lock().expect("lock").push(command.tool().clone());
            self.inner.exec(command)
        }
    }
    let root = fixture(t).await?;
    let spy = Spy {
        inner: t.exec.clone(),
        seen: Default::default(),
    };
    let tools = Tools::new(&spy);
    let _ = tools.glob(&root, "**", 1).await;
    let _ = tools.list(&root, Some(1), 1).await;
    let _ = tools.grep(&root, "x", &GrepOptions::default(), 1).await;
    let _ = tools
        .read(&format!("{root}/README.md"), ReadRange::All)
        .await;
    let _ = tools.bash("true", None).await;
    let seen = spy.seen.lock().expect("lock").clone();
    let want = [Tool::GLOB, Tool::LIST, Tool::GREP, Tool::READ, Tool::BASH];
    if seen != want {
        return fail(format!("commands carried tools {seen:?}, want {want:?}"));
    }
    Ok(())
}
