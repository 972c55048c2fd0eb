//! The tools against the local adapter: with this host's tools (GNU here), with busybox's (when
//! installed: the tools of Alpine-like images), and as an unprivileged user (when `setpriv` is
//! available and we are root), where permission bits apply.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use execseam_core::Exec;
use execseam_local::{LocalConfig, LocalExec};
use execseam_tools::{GrepOptions, ReadRange, ToolError, Tools, WriteOptions};

mod common;

use common::{Dir, busybox_bin};

fn tree() -> Dir {
    let d = Dir::new("tree");
    d.file("src/main.rs", b"fn main() {\n    // needle\n}\n");
    d.file("src/a b/c.rs", b"needle\nno\nneedle again");
    d.file("-x/\n.txt", b"needle newline name\n");
    d.file("bin", b"needle\0bin\n");
    std::fs::create_dir_all(d.0.join("empty/dir")).unwrap();
    d
}

/// Renders every listing tool's answer on `root`, for comparisons.
async fn render(tools: &Tools<'_>, root: &str) -> String {
    let mut s = String::new();
    let g = tools.glob(root, "**", 100).await.unwrap();
    for p in &g.items {
        s.push_str(&format!("g {p}\n"));
    }
    let l = tools.list(root, None, 100).await.unwrap();
    for e in &l.items {
        s.push_str(&format!("l {} {}\n", e.path, e.is_dir));
    }
    let m = tools
        .grep(root, "nee+dle", &GrepOptions::default(), 100)
        .await
        .unwrap();
    for m in &m.items {
        s.push_str(&format!(
            "m {}:{}:{}\n",
            m.path,
            m.line,
            execseam_tools::escape(&m.text)
        ));
    }
    let m = tools
        .grep(
            root,
            "NEEDLE",
            &GrepOptions {
                glob: Some("*.rs".into()),
                fixed: true,
                ignore_case: true,
                ..GrepOptions::default()
            },
            100,
        )
        .await
        .unwrap();
    for m in &m.items {
        s.push_str(&format!("i {}:{}\n", m.path, m.line));
    }
    let r = tools
        .read(
            &format!("{root}/src/a b/c.rs"),
            ReadRange::Lines {
                first: 2,
                count: Some(2),
            },
        )
        .await
        .unwrap();
    s.push_str(&format!("r {r:?}\n"));
    s
}

const EXPECTED: &str = r#"g -x/\n.txt
g bin
g src/a b/c.rs
g src/main.rs
l -x true
l -x/\n.txt false
l bin false
l empty true
l empty/dir true
l src true
l src/a b true
l src/a b/c.rs false
l src/main.rs false
m -x/\n.txt:1:needle newline name
m bin:1:needle\u{0}bin
m src/a b/c.rs:1:needle
m src/a b/c.rs:3:needle again
m src/main.rs:2:    // needle
i src/a b/c.rs:1
i src/a b/c.rs:3
i src/main.rs:2
r b"no\nneedle again"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn host_tools() {
    let d = tree();
    let exec = LocalExec::new();
    assert_eq!(render(&Tools::new(&exec), &d.s()).await, EXPECTED);
}

#[tokio::test(flavor = "multi_thread")]
async fn busybox_tools_give_the_same_bytes() {
    let Some(bin) = busybox_bin(&[]) else {
        eprintln!("busybox is not installed: this test proves nothing here");
        return;
    };
    let exec = LocalExec::with_config(LocalConfig::new().base_env([("PATH", bin.s())]));
    // Really busybox: `find --version` is not a busybox option.
    let o = exec
        .exec(execseam_core::Command::new(["find", "--version"]).unwrap())
        .await
        .unwrap();
    assert!(!o.exit.success(), "find is GNU find: {o:?}");
    let d = tree();
    let tools = Tools::new(&exec);
    assert_eq!(render(&tools, &d.s()).await, EXPECTED);
    // write and apply_patch too.
    tools.write(&d.p("w.txt"), "one\ntwo\n").await.unwrap();
    let files = tools
        .apply_patch(
            &d.s(),
            "--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n",
        )
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(std::fs::read(d.0.join("w.txt")).unwrap(), b"one\nTWO\n");
    match tools.grep(&d.s(), "(", &GrepOptions::default(), 1).await {
        Err(ToolError::InvalidPattern { message, .. }) => assert!(!message.is_empty()),
        other => panic!("busybox grep, invalid regex: {other:?}"),
    }
    // Context lines through busybox's wc/head, edit, and the envelope format.
    let ctx = GrepOptions {
        before: 1,
        after: 1,
        ..GrepOptions::default()
    };
    let g = tools.grep(&d.p("src"), "^no$", &ctx, 10).await.unwrap();
    assert_eq!(g.items.len(), 1, "{g:?}");
    assert_eq!(g.items[0].before, ["needle"]);
    assert_eq!(g.items[0].after, ["needle again"]);
    assert_eq!(
        tools.edit(&d.p("w.txt"), "TWO", "2", false).await.unwrap(),
        1
    );
    tools
        .apply_patch(
            &d.s(),
            "*** Begin Patch\n*** Update File: w.txt\n@@\n one\n-2\n+two\n*** End Patch\n",
        )
        .await
        .unwrap();
    assert_eq!(std::fs::read(d.0.join("w.txt")).unwrap(), b"one\ntwo\n");
    match tools.read(&d.p("nope"), ReadRange::All).await {
        Err(ToolError::NotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
}

fn setpriv() -> Option<PathBuf> {
    // SAFETY-free check: only root can drop to another user.
    let uid = std::fs::metadata("/proc/self").ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    })?;
    if uid != 0 {
        return None;
    }
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

#[tokio::test(flavor = "multi_thread")]
async fn permission_denied_as_an_unprivileged_user() {
    let Some(setpriv) = setpriv() else {
        eprintln!("not root or no setpriv: this test proves nothing here");
        return;
    };
    let exec = LocalExec::with_config(LocalConfig::new().launcher([
        setpriv.to_str().unwrap(),
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ]));
    let o = exec
        .exec(execseam_core::Command::new(["id", "-u"]).unwrap())
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"65534\n");
    let d = Dir::new("perm");
    d.file("closed/x", b"needle\n");
    d.file("secret", b"needle\n");
    d.file("open", b"needle\n");
    std::fs::create_dir_all(d.0.join("ro")).unwrap();
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(d.0.join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode("closed", 0o700); // owned by root: closed to nobody
    mode("secret", 0o600);
    mode("ro", 0o755); // not writable by nobody
    let tools = Tools::new(&exec);
    let denied = |r: Result<(), ToolError>, what: &str| match r {
        Err(ToolError::PermissionDenied { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    denied(
        tools.read(&d.p("secret"), ReadRange::All).await.map(drop),
        "read an unreadable file",
    );
    denied(
        tools.read(&d.p("closed/x"), ReadRange::All).await.map(drop),
        "read under an unsearchable directory",
    );
    denied(
        tools.list(&d.p("closed"), None, 10).await.map(drop),
        "list a closed dir",
    );
    denied(
        tools.glob(&d.p("closed"), "**", 10).await.map(drop),
        "glob a closed dir",
    );
    denied(
        tools
            .grep(&d.p("closed"), "x", &GrepOptions::default(), 10)
            .await
            .map(drop),
        "grep a closed dir",
    );
    denied(
        tools.write(&d.p("ro/new"), "x").await.map(drop),
        "write into ro",
    );
    denied(
        tools.write(&d.p("secret"), "x").await.map(drop),
        "overwrite a file of root's",
    );
    denied(
        tools
            .write_with(
                &d.p("ro/a/b"),
                "x",
                WriteOptions {
                    create_parents: true,
                },
            )
            .await
            .map(drop),
        "create parents in ro",
    );
    // A walk over unreadable parts: a result that names them.
    let g = tools
        .grep(&d.s(), "needle", &GrepOptions::default(), 10)
        .await
        .unwrap();
    assert_eq!(g.items.len(), 1, "{g:?}");
    assert_eq!(g.items[0].path.as_str(), Some("open"));
    assert_eq!(g.skipped.len(), 2, "{g:?}");
    assert!(
        g.skipped.iter().all(|s| s.contains("Permission denied")),
        "{g:?}"
    );
    let l = tools.list(&d.s(), None, 10).await.unwrap();
    assert_eq!(l.skipped.len(), 1, "{l:?}");
    let names: Vec<_> = l.items.iter().map(|e| e.path.to_string()).collect();
    assert_eq!(names, ["closed", "open", "ro", "secret"]);
    // A failed patch writes nothing.
    match tools
        .apply_patch(&d.s(), "--- a/ro/f\n+++ b/ro/f\n@@ -0,0 +1 @@\n+x\n")
        .await
    {
        Err(ToolError::NotFound { .. }) => {}
        other => panic!("patching a missing file: {other:?}"),
    }
    match tools
        .apply_patch(&d.s(), "--- /dev/null\n+++ b/ro/f\n@@ -0,0 +1 @@\n+x\n")
        .await
    {
        Err(ToolError::PermissionDenied { .. }) => {}
        other => panic!("creating in ro: {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(d.0.join("ro")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn write_is_atomic_and_keeps_the_mode() {
    let d = Dir::new("write");
    d.file("x.sh", b"old");
    std::fs::set_permissions(d.0.join("x.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink(d.0.join("x.sh"), d.0.join("link")).unwrap();
    let exec = LocalExec::new();
    let tools = Tools::new(&exec);
    tools.write(&d.p("x.sh"), "new").await.unwrap();
    let meta = std::fs::metadata(d.0.join("x.sh")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o751);
    assert_eq!(std::fs::read(d.0.join("x.sh")).unwrap(), b"new");
    // A symlink is replaced, not followed.
    tools.write(&d.p("link"), "own").await.unwrap();
    assert!(
        !std::fs::symlink_metadata(d.0.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(d.0.join("x.sh")).unwrap(), b"new");
    // Only the two files remain: no temporary file.
    let mut names: Vec<_> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["link", "x.sh"]);
    // Parents are created by default; refused on request.
    let refuse = WriteOptions {
        create_parents: false,
    };
    match tools.write_with(&d.p("missing/x"), "x", refuse).await {
        Err(ToolError::NotFound { path }) => assert_eq!(path, d.p("missing")),
        other => panic!("{other:?}"),
    }
    assert!(!d.0.join("missing").exists());
    tools.write(&d.p("made/deep/x"), "x").await.unwrap();
    assert_eq!(std::fs::read(d.0.join("made/deep/x")).unwrap(), b"x");
    match tools.write(&d.p("x.sh/y"), "x").await {
        Err(ToolError::NotADirectory { .. }) => {}
        other => panic!("a file as a parent: {other:?}"),
    }
    match tools.write("relative/x", "x").await {
        Err(ToolError::InvalidArgument { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn streaming_collects_the_same() {
    let d = tree();
    let exec = LocalExec::new();
    let a = render(&Tools::new(&exec), &d.s()).await;
    let b = render(&Tools::new(&exec).streaming(true), &d.s()).await;
    assert_eq!(a, b);
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_and_roots() {
    let d = tree();
    let exec = LocalExec::new();
    let tools = Tools::new(&exec);
    let g = tools.glob(&d.s(), "**", 0).await.unwrap();
    assert_eq!((g.items.len(), g.omitted, g.total()), (0, 4, 4));
    let g = tools
        .glob(&format!("{}//src/./", d.s()), "**/*.rs", 1)
        .await
        .unwrap();
    assert_eq!(g.items[0].as_str(), Some("a b/c.rs"));
    assert_eq!(g.omitted, 1);
    let l = tools.list(&d.s(), Some(1), 100).await.unwrap();
    assert_eq!(l.items.len(), 4);
    assert!(matches!(
        tools.list(&d.s(), Some(0), 1).await,
        Err(ToolError::InvalidArgument { .. })
    ));
    assert!(matches!(
        tools.list(&format!("{}/../x", d.s()), None, 1).await,
        Err(ToolError::InvalidArgument { .. })
    ));
    // The root `/` works (paths relative to it have no leading slash).
    let l = tools.list("/", Some(1), usize::MAX).await.unwrap();
    assert!(
        l.items
            .iter()
            .any(|e| e.path.as_str() == Some("tmp") && e.is_dir),
        "{l:?}"
    );
}
