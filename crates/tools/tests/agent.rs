//! The tools agent builders rely on, against the local adapter: `edit`, `apply_patch` in the
//! `*** Begin Patch` format, and grep's context, files-with-matches and count modes.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use execseam_local::LocalExec;
use execseam_tools::{Change, FileCount, GrepOptions, RelPath, ToolError, Tools};

static N: AtomicU32 = AtomicU32::new(0);

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Dir {
    fn new() -> Dir {
        let d = std::env::temp_dir().canonicalize().unwrap().join(format!(
            "execseam-agent-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn s(&self) -> String {
        self.0.to_str().unwrap().to_owned()
    }
    fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", self.s())
    }
    fn file(&self, rel: &str, content: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.join(rel)).unwrap()
    }
    /// Every file below, with its content (to prove nothing changed).
    fn snapshot(&self) -> Vec<(String, String)> {
        fn walk(base: &std::path::Path, d: &std::path::Path, out: &mut Vec<(String, String)>) {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(base, &p, out);
                } else {
                    let rel = p.strip_prefix(base).unwrap().to_str().unwrap().to_owned();
                    out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        let mut v = Vec::new();
        walk(&self.0, &self.0, &mut v);
        v.sort();
        v
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn edit_replaces_exactly_or_fails_typed() {
    let d = Dir::new();
    d.file("a.rs", "let x = 1;\nlet y = 1;\nlet x = 1;\n");
    std::fs::set_permissions(d.0.join("a.rs"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let exec = LocalExec::new();
    let t = Tools::new(&exec);
    match t
        .edit(&d.p("a.rs"), "let x = 1;", "let x = 2;", false)
        .await
    {
        Err(ToolError::NotUnique { path, count }) => {
            assert_eq!((path.as_str(), count), (d.p("a.rs").as_str(), 2));
        }
        other => panic!("{other:?}"),
    }
    match t.edit(&d.p("a.rs"), "let z", "w", true).await {
        Err(e @ ToolError::NoMatch { .. }) => assert_eq!(e.code(), "no-match"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        t.edit(&d.p("a.rs"), "", "w", true).await,
        Err(ToolError::InvalidArgument { .. })
    ));
    assert!(matches!(
        t.edit(&d.p("nope.rs"), "a", "b", false).await,
        Err(ToolError::NotFound { .. })
    ));
    assert!(!d.0.join("nope.rs").exists(), "edit never creates");
    assert_eq!(d.read("a.rs"), "let x = 1;\nlet y = 1;\nlet x = 1;\n");
    assert_eq!(
        t.edit(&d.p("a.rs"), "y = 1", "y = 9", false).await.unwrap(),
        1
    );
    assert_eq!(
        t.edit(&d.p("a.rs"), "x = 1", "x = 2", true).await.unwrap(),
        2
    );
    assert_eq!(d.read("a.rs"), "let x = 2;\nlet y = 9;\nlet x = 2;\n");
    // Atomic rename: the mode is kept, no temporary file remains.
    let mode = std::fs::metadata(d.0.join("a.rs"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    assert_eq!(d.snapshot().len(), 1);
    // Overlapping occurrences count from the start, non-overlapping.
    d.file("o.txt", "aaa");
    assert_eq!(t.edit(&d.p("o.txt"), "aa", "b", true).await.unwrap(), 1);
    assert_eq!(d.read("o.txt"), "ba");
}

#[tokio::test(flavor = "multi_thread")]
async fn begin_patch_adds_updates_moves_and_deletes() {
    let d = Dir::new();
    d.file("src/lib.rs", "fn a() {\n    1\n}\n\nfn b() {\n    1\n}\n");
    d.file("old.txt", "bye\n");
    d.file("mv/from.txt", "x\ny\n");
    let exec = LocalExec::new();
    let t = Tools::new(&exec);
    let patch = format!(
        "*** Begin Patch\n\
         *** Add File: docs/new.md\n+# New\n+\n+text\n\
         *** Update File: src/lib.rs\n@@ fn b() {{\n-    1\n+    2\n\
         *** Delete File: old.txt\n\
         *** Update File: {}\n*** Move to: mv/to.txt\n@@\n x\n-y\n+Y\n\
         *** End Patch\n",
        d.p("mv/from.txt") // an absolute path below the root is accepted
    );
    let mut files = t.apply_patch(&d.s(), &patch).await.unwrap();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let got: Vec<(&str, Change)> = files.iter().map(|f| (f.path.as_str(), f.change)).collect();
    assert_eq!(
        got,
        [
            ("docs/new.md", Change::Created),
            ("mv/from.txt", Change::Deleted),
            ("mv/to.txt", Change::Created),
            ("old.txt", Change::Deleted),
            ("src/lib.rs", Change::Modified),
        ]
    );
    assert_eq!(
        d.snapshot(),
        [
            ("docs/new.md".into(), "# New\n\ntext\n".into()),
            ("mv/to.txt".into(), "x\nY\n".into()),
            (
                "src/lib.rs".into(),
                "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n".into()
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn begin_patch_is_all_or_nothing() {
    let d = Dir::new();
    d.file("a.txt", "one\ntwo\n");
    d.file("b.txt", "three\n");
    let exec = LocalExec::new();
    let t = Tools::new(&exec);
    let before = d.snapshot();
    // The first file would apply; the second does not: nothing is written.
    let p = "*** Begin Patch\n*** Update File: a.txt\n-one\n+ONE\n*** Add File: c.txt\n+c\n*** Update File: b.txt\n-four\n+FOUR\n*** End Patch";
    match t.apply_patch(&d.s(), p).await {
        Err(ToolError::PatchConflict { path, hunk, .. }) => {
            assert_eq!((path, hunk), (d.p("b.txt"), 1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.snapshot(), before);
    for (p, want) in [
        (
            "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch",
            "already-exists",
        ),
        (
            "*** Begin Patch\n*** Delete File: zz.txt\n*** End Patch",
            "not-found",
        ),
        (
            "*** Begin Patch\n*** Update File: zz.txt\n-a\n+b\n*** End Patch",
            "not-found",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n-one\n+1\n*** End Patch",
            "already-exists",
        ),
        (
            "*** Begin Patch\n*** Update File: ../a.txt\n-one\n+1\n*** End Patch",
            "invalid-patch",
        ),
        ("*** Begin Patch\n*** Add File: q\n+x\n", "invalid-patch"),
    ] {
        let e = t.apply_patch(&d.s(), p).await.unwrap_err();
        assert_eq!(e.code(), want, "{p:?}: {e}");
        assert_eq!(d.snapshot(), before, "{p:?}");
    }
    // Unified diffs still work.
    t.apply_patch(
        &d.s(),
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-three\n+3\n",
    )
    .await
    .unwrap();
    assert_eq!(d.read("b.txt"), "3\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn grep_context_files_and_counts() {
    let d = Dir::new();
    d.file("b.txt", "l1\nhit one\nl3\nl4\nHIT two\n");
    d.file("a.txt", "hit\n");
    d.file("c/d.rs", "nothing\n");
    d.file("c/e.rs", "a.b hit\naxb hit\n");
    let exec = LocalExec::new();
    let t = Tools::new(&exec);
    let ci = GrepOptions {
        ignore_case: true,
        before: 1,
        after: 2,
        ..GrepOptions::default()
    };
    let g = t.grep(&d.s(), "hit", &ci, 100).await.unwrap();
    let got: Vec<(String, u64, Vec<String>, Vec<String>)> = g
        .items
        .iter()
        .map(|m| {
            let s = |v: &[bytes::Bytes]| {
                v.iter()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect::<Vec<_>>()
            };
            (m.path.to_string(), m.line, s(&m.before), s(&m.after))
        })
        .collect();
    let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        got,
        [
            ("a.txt".into(), 1, v(&[]), v(&[])),
            ("b.txt".into(), 2, v(&["l1"]), v(&["l3", "l4"])),
            ("b.txt".into(), 5, v(&["l4"]), v(&[])),
            ("c/e.rs".into(), 1, v(&[]), v(&["axb hit"])),
            ("c/e.rs".into(), 2, v(&["a.b hit"]), v(&[])),
        ]
    );
    // Without context, no extra lines; case-sensitive finds fewer.
    let g = t
        .grep(&d.s(), "hit", &GrepOptions::default(), 100)
        .await
        .unwrap();
    assert_eq!(g.items.len(), 4);
    assert!(
        g.items
            .iter()
            .all(|m| m.before.is_empty() && m.after.is_empty())
    );
    // Fixed strings: `.` is literal.
    let fixed = GrepOptions {
        fixed: true,
        ..GrepOptions::default()
    };
    let g = t.grep(&d.s(), "a.b", &fixed, 100).await.unwrap();
    assert_eq!(g.items.len(), 1);
    let g = t
        .grep(&d.s(), "a.b", &GrepOptions::default(), 100)
        .await
        .unwrap();
    assert_eq!(g.items.len(), 2);
    // Files with matches, sorted and truncated by file.
    let f = t.grep_files(&d.s(), "hit", &ci, 2).await.unwrap();
    assert_eq!(f.items, [RelPath::new("a.txt"), RelPath::new("b.txt")]);
    assert_eq!(f.omitted, 1);
    // Counts: every match counted whatever the limit; files without one left out.
    let c = t.grep_count(&d.s(), "hit", &ci, 100).await.unwrap();
    let fc = |p: &str, count| FileCount {
        path: RelPath::new(p),
        count,
    };
    assert_eq!(c.items, [fc("a.txt", 1), fc("b.txt", 2), fc("c/e.rs", 2)]);
    let c = t.grep_count(&d.s(), "hit", &ci, 1).await.unwrap();
    assert_eq!((c.items, c.omitted), (vec![fc("a.txt", 1)], 2));
    // A glob filter applies to the modes too.
    let rs = GrepOptions {
        glob: Some("*.rs".into()),
        ..GrepOptions::default()
    };
    let f = t.grep_files(&d.s(), "hit", &rs, 10).await.unwrap();
    assert_eq!(f.items, [RelPath::new("c/e.rs")]);
    // Truncation happens before context is read: the kept matches only.
    let g = t.grep(&d.s(), "hit", &ci, 2).await.unwrap();
    assert_eq!((g.items.len(), g.omitted), (2, 3));
    assert_eq!(g.items[1].after.len(), 2);
}
