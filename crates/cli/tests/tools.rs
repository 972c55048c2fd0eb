//! `execseam glob|list|grep|read|write|patch` through the built binary and the local adapter.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// A small source tree in a fresh directory under the (canonical) temp dir, removed when
/// dropped.
fn tree(tag: &str) -> tempfile::TempDir {
    let t = tempfile::Builder::new()
        .prefix(&format!("execseam-cli-tools-{tag}-"))
        .tempdir_in(std::env::temp_dir().canonicalize().unwrap())
        .unwrap();
    for (p, c) in [
        ("src/main.rs", "fn main() {\n    // needle\n}\n"),
        ("src/lib.rs", "pub fn needle() {}\n"),
        ("b.txt", "no\n"),
        ("a b.txt", "needle\n"),
    ] {
        let p = t.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    }
    t
}

fn execseam(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    sin.write_all(stdin.unwrap_or_default()).unwrap();
    drop(sin);
    child.wait_with_output().unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn glob_and_list_print_sorted_truncated_paths() {
    let t = tree("glob");
    let root = t.path().to_str().unwrap();
    let o = execseam(
        &["glob", "**", "--root", root, "--limit", "3", "--json"],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(
        json(&o),
        serde_json::json!({"paths": ["a b.txt", "b.txt", "src/lib.rs"], "omitted": 1})
    );
    let o = execseam(&["glob", "src/*.rs", "--root", root], None);
    assert_eq!(o.stdout, b"src/lib.rs\nsrc/main.rs\n");
    let o = execseam(&["list", "--root", root, "--json"], None);
    assert_eq!(
        json(&o),
        serde_json::json!({"paths": ["a b.txt", "b.txt", "src/", "src/lib.rs", "src/main.rs"], "omitted": 0})
    );
    let o = execseam(&["list", "src", "--depth", "1", "--root", root], None);
    assert_eq!(o.stdout, b"lib.rs\nmain.rs\n");
    // Omitted entries are announced on stderr in the plain form.
    let o = execseam(&["list", "--root", root, "--limit", "1"], None);
    assert_eq!(o.stdout, b"a b.txt\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("4 more omitted"));
}

#[test]
fn grep_read_write_patch() {
    let t = tree("grep");
    let root = t.path().to_str().unwrap();
    let o = execseam(&["grep", "needle", "--root", root], None);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "a b.txt:1:needle\nsrc/lib.rs:1:pub fn needle() {}\nsrc/main.rs:2:    // needle\n"
    );
    let o = execseam(
        &[
            "grep", "NEEDLE", "-i", "--glob", "*.rs", "--root", root, "--limit", "1", "--json",
        ],
        None,
    );
    assert_eq!(
        json(&o),
        serde_json::json!({"matches": [{"path": "src/lib.rs", "line": 1, "text": "pub fn needle() {}", "before": [], "after": []}], "omitted": 1, "skipped": []})
    );
    let o = execseam(
        &["read", "src/main.rs", "--lines", "2:1", "--root", root],
        None,
    );
    assert_eq!(o.stdout, b"    // needle\n");
    let o = execseam(
        &["write", "new.txt", "--root", root, "--json"],
        Some(b"hello\n"),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(json(&o)["bytes"], 6);
    assert_eq!(std::fs::read(t.path().join("new.txt")).unwrap(), b"hello\n");
    let patch = "--- a/new.txt\n+++ b/new.txt\n@@ -1 +1 @@\n-hello\n+bye\n";
    let o = execseam(&["patch", "--root", root], Some(patch.as_bytes()));
    assert_eq!(o.stdout, b"modified new.txt\n", "{o:?}");
    assert_eq!(std::fs::read(t.path().join("new.txt")).unwrap(), b"bye\n");
    // Context lines, files with matches, counts; edit; a Begin Patch.
    let o = execseam(
        &[
            "grep", "needle", "-B", "1", "--root", root, "--glob", "main.rs",
        ],
        None,
    );
    assert_eq!(
        o.stdout,
        b"src/main.rs-1-fn main() {\nsrc/main.rs:2:    // needle\n"
    );
    let o = execseam(
        &["grep", "needle", "-l", "--root", root, "--limit", "2"],
        None,
    );
    assert_eq!(o.stdout, b"a b.txt\nsrc/lib.rs\n");
    let o = execseam(&["grep", "e", "-c", "--root", root, "--json"], None);
    assert_eq!(
        json(&o)["counts"][0],
        serde_json::json!({"path": "a b.txt", "count": 1})
    );
    let o = execseam(
        &[
            "edit", "new.txt", "--old", "bye", "--new", "ciao", "--root", root, "--json",
        ],
        None,
    );
    assert_eq!(json(&o)["replacements"], 1, "{o:?}");
    let o = execseam(
        &[
            "edit", "new.txt", "--old", "zzz", "--new", "y", "--root", root, "--json",
        ],
        None,
    );
    assert_eq!(
        (o.status.code(), json(&o)["error"]["code"].clone()),
        (Some(1), "no-match".into())
    );
    let patch = "*** Begin Patch\n*** Update File: new.txt\n-ciao\n+hello\n*** End Patch\n";
    let o = execseam(&["patch", "--root", root], Some(patch.as_bytes()));
    assert_eq!(o.stdout, b"modified new.txt\n", "{o:?}");
    assert_eq!(std::fs::read(t.path().join("new.txt")).unwrap(), b"hello\n");
}

#[test]
fn typed_errors_exit_1_and_infrastructure_errors_125() {
    let t = tree("err");
    let root = t.path().to_str().unwrap();
    let o = execseam(&["read", "nope", "--root", root], None);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.starts_with("execseam: not found: "), "{err}");
    let o = execseam(&["grep", "(", "--root", root, "--json"], None);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json(&o)["error"]["code"], "invalid-pattern");
    let o = execseam(
        &[
            "write",
            "no/dir/x",
            "--no-create-parents",
            "--root",
            root,
            "--json",
        ],
        Some(b"x"),
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json(&o)["error"]["code"], "not-found");
    assert_eq!(
        json(&o)["error"]["retry"],
        serde_json::json!({"class": "never"})
    );
    let o = execseam(&["write", "no/dir/x", "--root", root], Some(b"x"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "parents are created by default: {o:?}"
    );
    let patch = "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-yes\n+no\n";
    let o = execseam(&["patch", "--root", root], Some(patch.as_bytes()));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(t.path().join("b.txt")).unwrap(), b"no\n");
    let o = execseam(
        &["glob", "**", "--adapter", "no-such-adapter", "--root", root],
        None,
    );
    assert_eq!(o.status.code(), Some(125));
}
