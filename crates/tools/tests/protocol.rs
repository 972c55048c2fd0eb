//! What the tools make of a sandbox's answers: malformed ones are protocol errors (never a
//! shortened result), infrastructure errors pass through unchanged, odd exits are `Failed`, and an
//! adapter serving listings natively (the extension point) gives exactly the command's results.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use execseam_core::{
    BoxFuture, Capabilities, Command, Error, ErrorKind, Exec, Exit, Output, Retry, Tool,
};
use execseam_local::LocalExec;
use execseam_tools::{GrepOptions, ReadRange, ToolError, Tools};
use execseam_tools_protocol::native::{self, GrepHits, ListOutput, NativeRequest};

/// Answers every command with the same output (or error).
struct Canned(Mutex<Option<Result<Output, Error>>>);

impl Canned {
    fn ok(stdout: &[u8], stderr: &[u8], exit: Exit) -> Canned {
        Canned(Mutex::new(Some(Ok(Output::new(
            stdout.to_vec(),
            stderr.to_vec(),
            exit,
        )))))
    }
}

impl Exec for Canned {
    fn provider(&self) -> &str {
        "canned"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::FULL
    }
    fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let r = self.0.lock().unwrap().take().expect("one command");
        Box::pin(async move { r })
    }
}

fn protocol<T: std::fmt::Debug>(r: Result<T, ToolError>) -> String {
    match r {
        Err(ToolError::Exec(e)) if e.kind() == ErrorKind::Protocol => {
            assert_eq!(e.retry(), Retry::Unsafe);
            e.message().to_owned()
        }
        other => panic!("want a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_listings_are_protocol_errors() {
    let list = |stdout: &'static [u8]| async move {
        let c = Canned::ok(stdout, b"", Exit::Code(0));
        Tools::new(&c).list("/r", None, 10).await
    };
    assert!(protocol(list(b"/r/a\0/other/b\0").await).contains("not below the root"));
    assert!(protocol(list(b"/r/a\0/r/b").await).contains("no final NUL"));
    assert!(protocol(list(b"/r/a\0/r/a\0/r/a\0").await).contains("twice"));
    assert!(protocol(list(b"/r\0").await).contains("not below the root"));
    let c = Canned::ok(b"/r/a\0/r/a\0", b"", Exit::Code(0));
    assert!(protocol(Tools::new(&c).glob("/r", "**", 10).await).contains("twice"));
    let c = Canned::ok(b"/r/a\x001:x\n/r/a\x001:y\n", b"", Exit::Code(0));
    let r = Tools::new(&c)
        .grep("/r", "x", &GrepOptions::default(), 10)
        .await;
    assert!(protocol(r).contains("twice"));
    let c = Canned::ok(b"/r/a\x00x:y\n", b"", Exit::Code(0));
    let r = Tools::new(&c)
        .grep("/r", "x", &GrepOptions::default(), 10)
        .await;
    protocol(r);
}

#[tokio::test]
async fn odd_exits_are_failed_and_infrastructure_errors_pass_through() {
    let c = Canned::ok(b"", b"sh: 1: find: not found\n", Exit::Code(127));
    match Tools::new(&c).glob("/r", "**", 10).await {
        Err(ToolError::Failed { tool, exit, stderr }) => {
            assert_eq!((tool, exit), (Tool::GLOB, Exit::Code(127)));
            assert!(stderr.contains("not found"));
        }
        other => panic!("{other:?}"),
    }
    let c = Canned::ok(b"partial", b"", Exit::Signal(9));
    assert!(matches!(
        Tools::new(&c).read("/r/x", ReadRange::All).await,
        Err(ToolError::Failed {
            exit: Exit::Signal(9),
            ..
        })
    ));
    let e = Error::new(ErrorKind::Unavailable, "gone").with_retry(Retry::SAFE);
    let c = Canned(Mutex::new(Some(Err(e))));
    match Tools::new(&c).list("/r", None, 1).await {
        Err(ToolError::Exec(e)) => {
            assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE))
        }
        other => panic!("{other:?}"),
    }
    // A typed failure line is read whatever the tool.
    let c = Canned(Mutex::new(Some(Ok(native::failure(
        native::Failure::NotFound,
        "/r/x",
    )))));
    assert!(matches!(
        Tools::new(&c).read("/r/x", ReadRange::All).await,
        Err(ToolError::NotFound { path }) if path == "/r/x"
    ));
}

#[tokio::test]
async fn write_needs_stdin() {
    struct NoStdin;
    impl Exec for NoStdin {
        fn provider(&self) -> &str {
            "nostdin"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                stdin: execseam_core::Delivery::Unsupported,
                ..Capabilities::FULL
            }
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            panic!("nothing may run")
        }
    }
    match Tools::new(&NoStdin).write("/r/x", "data").await {
        Err(ToolError::Exec(e)) => assert_eq!(e.kind(), ErrorKind::Unsupported),
        other => panic!("{other:?}"),
    }
}

/// Serves list, glob and (fixed-string) grep natively from `std::fs`, in reverse order, the rest
/// through the local adapter: the extension point, end to end.
struct NativeFs {
    local: LocalExec,
    served: Mutex<Vec<Tool>>,
}

fn walk(dir: &Path, rel: &[u8], depth: u32, max: Option<u32>, out: &mut Vec<(Vec<u8>, bool)>) {
    if max.is_some_and(|m| depth > m) {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let e = e.unwrap();
        let mut r = rel.to_vec();
        if !r.is_empty() {
            r.push(b'/');
        }
        r.extend_from_slice(e.file_name().as_bytes());
        let is_dir = e.file_type().unwrap().is_dir();
        out.push((r.clone(), is_dir));
        if is_dir {
            walk(&e.path(), &r, depth + 1, max, out);
        }
    }
}

impl Exec for NativeFs {
    fn provider(&self) -> &str {
        "nativefs"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tools: &[Tool::LIST, Tool::GLOB, Tool::GREP],
            processes: None,
            ..Capabilities::FULL
        }
    }
    fn exec(&self, cmd: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move {
            let Some(req) = NativeRequest::parse(&cmd) else {
                return self.local.exec(cmd).await;
            };
            if let NativeRequest::Grep(g) = &req
                && !g.fixed
            {
                return self.local.exec(cmd).await;
            }
            let root = Path::new(req.root());
            if !root.is_dir() {
                return Ok(native::failure(native::Failure::NotFound, req.root()));
            }
            self.served.lock().unwrap().push(req.tool());
            Ok(match &req {
                NativeRequest::List(l) => {
                    let mut all = Vec::new();
                    walk(root, b"", 1, l.depth, &mut all);
                    let mut out = ListOutput::new(&l.root);
                    for (p, d) in all.iter().rev() {
                        out.entry(p, *d);
                    }
                    out.finish()
                }
                NativeRequest::Glob(g) => {
                    let start = if g.start.is_empty() {
                        root.to_path_buf()
                    } else {
                        root.join(&g.start)
                    };
                    let mut all = Vec::new();
                    walk(&start, g.start.as_bytes(), 1, None, &mut all);
                    let mut out = ListOutput::new(&g.root);
                    for (p, d) in all.iter().rev() {
                        let name = p.rsplit(|&b| b == b'/').next().unwrap();
                        if !d && g.matches_name(name) {
                            out.entry(p, false);
                        }
                    }
                    out.finish()
                }
                NativeRequest::Grep(g) => {
                    let mut all = Vec::new();
                    walk(root, b"", 1, None, &mut all);
                    let mut out = GrepHits::new(&g.root);
                    for (p, d) in all.iter().rev() {
                        let name = p.rsplit(|&b| b == b'/').next().unwrap();
                        if *d || !g.matches_name(name) {
                            continue;
                        }
                        let content = std::fs::read(root.join(std::ffi::OsStr::from_bytes(p)))
                            .unwrap_or_default();
                        let body = content.strip_suffix(b"\n").unwrap_or(&content);
                        if content.is_empty() {
                            continue;
                        }
                        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
                            let needle = g.pattern.as_bytes();
                            if line.windows(needle.len().max(1)).any(|w| w == needle) {
                                out.hit(p, i as u64 + 1, line);
                            }
                        }
                    }
                    out.finish()
                }
                _ => unreachable!(),
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_native_listing_gives_the_same_results() {
    let dir = std::env::temp_dir()
        .canonicalize()
        .unwrap()
        .join(format!("execseam-tools-native-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (p, c) in [
        ("src/a.rs", &b"needle\nx\n"[..]),
        ("src/deep/b.rs", b"x needle"),
        ("z\n.md", b"needle"),
        ("-d/e f.txt", b"no\nneedle here\n"),
    ] {
        let p = dir.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    }
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let root = dir.to_str().unwrap();
    let local = LocalExec::new();
    let native = NativeFs {
        local: LocalExec::new(),
        served: Mutex::new(Vec::new()),
    };
    let fixed = GrepOptions {
        fixed: true,
        ..GrepOptions::default()
    };
    let (a, b) = (Tools::new(&local), Tools::new(&native));
    for limit in [0, 2, 100] {
        assert_eq!(
            a.list(root, None, limit).await.unwrap(),
            b.list(root, None, limit).await.unwrap()
        );
        assert_eq!(
            a.list(root, Some(1), limit).await.unwrap(),
            b.list(root, Some(1), limit).await.unwrap()
        );
        for pattern in ["**", "src/**/*.rs", "*.txt", "**/*.txt"] {
            assert_eq!(
                a.glob(root, pattern, limit).await.unwrap(),
                b.glob(root, pattern, limit).await.unwrap(),
                "{pattern}"
            );
        }
        assert_eq!(
            a.grep(root, "needle", &fixed, limit).await.unwrap(),
            b.grep(root, "needle", &fixed, limit).await.unwrap()
        );
    }
    let served = native.served.lock().unwrap().clone();
    assert!(
        served.contains(&Tool::LIST)
            && served.contains(&Tool::GLOB)
            && served.contains(&Tool::GREP)
    );
    match b.list(&format!("{root}/nope"), None, 1).await {
        Err(ToolError::NotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
