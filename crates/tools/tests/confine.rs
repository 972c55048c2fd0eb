//! Paths that must stay beneath a root (issue 38): `apply_patch` never writes (or reads) through
//! a symlink out of its root, and [`Tools::confined`] holds every tool to one root. Also: a read
//! through an adapter whose output is text is still byte-exact.
//!
//! Run with this host's shell (dash) and with busybox's applets when installed.

use bytes::Bytes;
use execseam_core::{BoxFuture, Capabilities, Command, Error, Exec, Output};
use execseam_local::{LocalConfig, LocalExec};
use execseam_tools::{GrepOptions, ReadRange, ToolError, Tools};

mod common;

use common::{Dir, busybox_bin};

/// A root with `link -> OUTSIDE`, `a/deep -> OUTSIDE`, `leak -> OUTSIDE/secret`, `in -> sub`
/// (a link that stays inside), and an ordinary `sub/ok.txt`.
fn rooted() -> (Dir, Dir) {
    let root = Dir::new("root");
    let outside = Dir::new("outside");
    outside.file("y", b"outside y\n");
    outside.file("secret", b"secret\n");
    root.file("sub/ok.txt", b"one\ntwo\n");
    root.link("link", &outside.0);
    root.link("a/deep", &outside.0);
    root.link("leak", &outside.0.join("secret"));
    root.link("in", &root.0.join("sub"));
    (root, outside)
}

fn outside_untouched(outside: &Dir) {
    let mut names: Vec<String> = std::fs::read_dir(&outside.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["secret", "y"],
        "something was written outside the root"
    );
    assert_eq!(std::fs::read(outside.0.join("y")).unwrap(), b"outside y\n");
}

fn is_outside(r: &Result<impl std::fmt::Debug, ToolError>) -> bool {
    matches!(r, Err(ToolError::OutsideRoot { .. }))
}

async fn apply_patch_stays_beneath_its_root(exec: &dyn Exec) {
    let (root, outside) = rooted();
    let tools = Tools::new(exec);
    let r = root.s();
    for patch in [
        // The case: a new file through a directory symlink.
        "*** Begin Patch\n*** Add File: link/pwn-patch3\n+pwned\n*** End Patch\n".to_owned(),
        "--- /dev/null\n+++ b/link/pwn\n@@ -0,0 +1 @@\n+pwned\n".to_owned(),
        // An update of a file outside, deeper, and an absolute path below the root.
        "*** Begin Patch\n*** Update File: link/y\n@@\n-outside y\n+changed\n*** End Patch\n".into(),
        format!("*** Begin Patch\n*** Add File: {r}/a/deep/new/x\n+x\n*** End Patch\n"),
        // A move whose destination is through the link.
        "*** Begin Patch\n*** Update File: sub/ok.txt\n*** Move to: link/moved\n@@\n one\n*** End Patch\n"
            .into(),
        // A leaf symlink to a file outside: not read (its content would leak in a conflict).
        "*** Begin Patch\n*** Update File: leak\n@@\n-secret\n+x\n*** End Patch\n".into(),
        "*** Begin Patch\n*** Delete File: leak\n*** End Patch\n".into(),
    ] {
        let res = tools.apply_patch(&r, &patch).await;
        assert!(is_outside(&res), "{patch:?}: {res:?}");
        outside_untouched(&outside);
    }
    assert_eq!(
        std::fs::read(root.0.join("sub/ok.txt")).unwrap(),
        b"one\ntwo\n",
        "a refused patch writes nothing"
    );
    // Ordinary patches still apply: new directories, the envelope and the unified form.
    tools
        .apply_patch(
            &r,
            "*** Begin Patch\n*** Add File: new/dir/f.txt\n+hi\n*** Update File: sub/ok.txt\n@@\n one\n-two\n+2\n*** End Patch\n",
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(root.0.join("new/dir/f.txt")).unwrap(),
        b"hi\n"
    );
    assert_eq!(
        std::fs::read(root.0.join("sub/ok.txt")).unwrap(),
        b"one\n2\n"
    );
    // A root that is itself a symlink is followed (the caller named it).
    let sub_link = root.p("in");
    tools
        .apply_patch(
            &sub_link,
            "--- a/ok.txt\n+++ b/ok.txt\n@@ -1,2 +1,2 @@\n one\n-2\n+two\n",
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(root.0.join("sub/ok.txt")).unwrap(),
        b"one\ntwo\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_patch_never_leaves_its_root_through_a_symlink() {
    apply_patch_stays_beneath_its_root(&LocalExec::new()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_patch_never_leaves_its_root_with_busybox_applets() {
    let Some(bin) = busybox_bin(&["od"]) else {
        eprintln!("busybox is not installed: this test proves nothing here");
        return;
    };
    let exec = LocalExec::with_config(LocalConfig::new().base_env([("PATH", bin.s())]));
    apply_patch_stays_beneath_its_root(&exec).await;
    // And a byte-exact read through a text-only output with busybox's od (no base64 applet).
    let d = Dir::new("bbbin");
    let all: Vec<u8> = (0..=255u8).collect();
    d.file("all", &all);
    let text = TextOnly(exec);
    let got = Tools::new(&text)
        .read(&d.p("all"), ReadRange::All)
        .await
        .unwrap();
    assert_eq!(&got[..], &all[..]);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_tool_is_held_to_the_confinement_root() {
    let (root, outside) = rooted();
    let exec = LocalExec::new();
    let r = root.s();
    let tools = Tools::new(&exec).confined(&r);
    // Through a symlinked directory, a leaf symlink, or lexically outside: refused.
    for p in [
        root.p("link/y"),
        root.p("leak"),
        outside.p("y"),
        "/etc/hostname".into(),
    ] {
        assert!(
            is_outside(&tools.read(&p, ReadRange::All).await),
            "read {p}"
        );
        assert!(
            is_outside(&tools.edit(&p, "y", "z", false).await),
            "edit {p}"
        );
    }
    for p in [root.p("link/new"), root.p("a/deep/x/y"), outside.p("new")] {
        assert!(is_outside(&tools.write(&p, "x").await), "write {p}");
    }
    outside_untouched(&outside);
    for dir in [root.p("link"), root.p("a/deep"), outside.s()] {
        assert!(is_outside(&tools.glob(&dir, "**", 10).await), "glob {dir}");
        assert!(is_outside(&tools.list(&dir, None, 10).await), "list {dir}");
        let g = tools
            .grep(&dir, "secret", &GrepOptions::default(), 10)
            .await;
        assert!(is_outside(&g), "grep {dir}: {g:?}");
        assert!(
            is_outside(&tools.bash("true", Some(&dir)).await),
            "bash {dir}"
        );
    }
    // Inside: as without confinement. The walks do not descend the links either.
    assert_eq!(
        &tools
            .read(&root.p("sub/ok.txt"), ReadRange::All)
            .await
            .unwrap()[..],
        b"one\ntwo\n"
    );
    tools.write(&root.p("sub/new.txt"), "new\n").await.unwrap();
    assert_eq!(
        tools
            .edit(&root.p("sub/new.txt"), "new", "old", false)
            .await
            .unwrap(),
        1
    );
    let g = tools.glob(&r, "**", 100).await.unwrap();
    assert!(g.items.iter().all(|p| !p.to_string().contains("/")
        || p.to_string().starts_with("sub/")
        || p.to_string().starts_with("a/")));
    let hits = tools
        .grep(&r, "secret", &GrepOptions::default(), 10)
        .await
        .unwrap();
    assert!(hits.items.is_empty(), "grep followed a link: {hits:?}");
    assert!(tools.list(&r, Some(1), 100).await.unwrap().items.len() >= 4);
    let o = tools.bash("pwd", None).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        r,
        "bash runs in the root by default"
    );
    let o = tools.bash("pwd", Some(&root.p("sub"))).await.unwrap();
    assert!(o.exit.success());
    outside_untouched(&outside);
}

/// An adapter whose output is text (as Vercel's): bytes that are not UTF-8 become U+FFFD.
struct TextOnly(LocalExec);

impl Exec for TextOnly {
    fn provider(&self) -> &str {
        "text-only"
    }
    fn capabilities(&self) -> Capabilities {
        let mut c = self.0.capabilities();
        c.binary_output = false;
        c
    }
    fn exec(&self, cmd: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move {
            let o = self.0.exec(cmd).await?;
            let lossy = |b: &Bytes| Bytes::from(String::from_utf8_lossy(b).into_owned());
            Ok(Output::new(lossy(&o.stdout), lossy(&o.stderr), o.exit))
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_through_a_text_only_output_is_byte_exact() {
    let d = Dir::new("bin");
    let all: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    d.file("all", &all);
    let text = TextOnly(LocalExec::new());
    let tools = Tools::new(&text);
    // The adapter would corrupt them: the proof that the read does not go through as-is.
    let raw = text
        .exec(Command::new(["cat", &d.p("all")]).unwrap())
        .await
        .unwrap();
    assert_ne!(&raw.stdout[..], &all[..]);
    assert_eq!(
        &tools.read(&d.p("all"), ReadRange::All).await.unwrap()[..],
        &all[..]
    );
    let part = tools
        .read(
            &d.p("all"),
            ReadRange::Bytes {
                offset: 126,
                len: Some(5),
            },
        )
        .await
        .unwrap();
    assert_eq!(&part[..], &all[126..131]);
    // edit keeps the bytes it does not replace.
    d.file("mixed", b"\xff\xfeKEY\x80\n");
    assert_eq!(
        tools
            .edit(&d.p("mixed"), "KEY", "VAL", false)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        std::fs::read(d.0.join("mixed")).unwrap(),
        b"\xff\xfeVAL\x80\n"
    );
    match tools.read(&d.p("nope"), ReadRange::All).await {
        Err(ToolError::NotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
}
