//! Chrono's full request on `execseam serve` (SQLite, the local adapter), as the Chrono adapter
//! sends it: `dependencies` (an uninstallable one is `DEPENDENCY_INSTALL_FAILED` with pip's log,
//! the program never runs; an npm package from an input file installs offline), `input_files`,
//! `retrieve_files` with `output_type: "file"` (a binary file round trip), `env` (the
//! server-owned `NYXID_*` never come from the caller), `network_enabled: false` (the local
//! adapter cannot enforce it: refused), and the idempotency hash over every field. Sources as in
//! `crates/adapter-chrono/tests/full_request.rs` (Ornn `sandboxClient.ts`, `chatService.ts`;
//! Aevatar `NyxIdCodeExecutionPort.cs`; seed 004).

mod common;

use base64::Engine as _;
use common::*;
use execseam_chrono::{ChronoExec, Executed, Terminal};
use execseam_chrono_contract::wire::{ExecuteRequest, InputFile, Language, OutputType, codes};
use execseam_core::{ErrorKind, Exit};
use execseam_server::Server;

async fn server() -> Server {
    Server::start(config(sqlite_url("full-request")))
        .await
        .expect("the server starts")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn dependencies_install_or_fail_typed_and_the_program_never_runs_after_a_failure() {
    let s = server().await;
    let sync = ChronoExec::new(chrono_config(&s.base_url(), ALICE)).unwrap();
    // The local adapter runs on this host: the program would leave this file.
    let m = std::env::temp_dir().join(marker());
    let mut req = ExecuteRequest::new(
        Language::Python,
        format!("open('{}', 'w').write('ran')", m.display()),
        60,
    );
    req.dependencies = vec!["not a valid requirement!!".into()];
    let Executed::DependenciesFailed { log, message } = sync.run(&req).await.unwrap() else {
        panic!("installed")
    };
    assert!(
        String::from_utf8_lossy(&log.stderr).contains("not a valid requirement"),
        "{log:?}"
    );
    assert_ne!(log.exit, Exit::Code(0));
    assert!(message.contains("pip"), "{message}");
    // The durable path: completed, the code and the log in the result.
    let c = client(&s.base_url(), ALICE);
    let t = c.run(&key("deps"), &req).await.unwrap();
    let Terminal::Ran { output, error, .. } = t else {
        panic!("{t:?}")
    };
    assert_eq!(
        error.map(|e| e.code),
        Some(codes::DEPENDENCY_INSTALL_FAILED.to_owned())
    );
    assert!(output.stderr.contains("not a valid requirement"));
    assert!(!m.exists(), "the program ran");
    // An npm package from an input file installs without a network, and the program uses it.
    let mut req = ExecuteRequest::new(
        Language::Javascript,
        "console.log(require('answer').x)",
        120,
    );
    req.input_files = vec![
        InputFile {
            path: "answer/package.json".into(),
            content: b64(br#"{"name":"answer","version":"1.0.0","main":"index.js"}"#),
        },
        InputFile {
            path: "answer/index.js".into(),
            content: b64(b"exports.x = 42;\n"),
        },
    ];
    req.dependencies = vec!["./answer".into()];
    let Executed::Ran { output, .. } = sync.run(&req).await.unwrap() else {
        panic!("not installed")
    };
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "42\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn files_env_network_and_the_idempotency_hash() {
    let s = server().await;
    let sync = ChronoExec::new(chrono_config(&s.base_url(), ALICE)).unwrap();
    let mut req = ExecuteRequest::new(
        Language::Bash,
        "printf '\\000\\377' > out.bin; mkdir -p d; cat in/x.txt > d/a.txt; \
         echo \"$GREETING ${NYXID_API_KEY:-unset}\"; exit 3",
        60,
    );
    req.input_files = vec![InputFile {
        path: "in/x.txt".into(),
        content: b64(b"from input\n"),
    }];
    req.env.insert("GREETING".into(), "hello".into());
    req.env.insert("NYXID_API_KEY".into(), "caller".into());
    req.output_type = Some(OutputType::File);
    req.retrieve_files = vec![
        "out.bin".into(),
        "d/*.txt".into(),
        "missing.*".into(),
        "d".into(),
    ];
    let Executed::Ran { output, files } = sync.run(&req).await.unwrap() else {
        panic!("not Ran")
    };
    assert_eq!(
        (
            String::from_utf8_lossy(&output.stdout).as_ref(),
            output.exit
        ),
        ("hello unset\n", Exit::Code(3))
    );
    let got: Vec<_> = files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.content.as_deref(),
                f.size,
                f.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("d", None, None, Some("is a directory")),
            (
                "d/a.txt",
                Some(b64(b"from input\n").as_str()),
                Some(11),
                None
            ),
            ("out.bin", Some("AP8="), Some(2), None),
            ("missing.*", None, None, Some("no such file")),
        ]
    );
    // Refused, typed, before anything runs: a network the local adapter cannot turn off,
    // paths outside the working directory, retrieve_files without output_type "file",
    // resources and image.
    let mut nonet = ExecuteRequest::new(Language::Bash, "true", 60);
    nonet.network_enabled = Some(false);
    let mut input_outside = ExecuteRequest::new(Language::Bash, "true", 60);
    input_outside.input_files = vec![InputFile {
        path: "/etc/x".into(),
        content: b64(b"x"),
    }];
    let mut no_type = ExecuteRequest::new(Language::Bash, "true", 60);
    no_type.retrieve_files = vec!["out.bin".into()];
    let mut image = ExecuteRequest::new(Language::Bash, "true", 60);
    image.image = Some("python:3.12".into());
    for r in [nonet, input_outside, no_type, image] {
        let e = sync.run(&r).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::InvalidCommand, Some(codes::INVALID_REQUEST)),
            "{r:?}: {e}"
        );
    }
    // The same key with another dependency list is key reuse.
    let c = client(&s.base_url(), ALICE);
    let k = key("fields");
    let base = ExecuteRequest::new(Language::Python, "print(1)", 60);
    c.submit(&k, &base).await.unwrap();
    let mut other = base.clone();
    other.dependencies = vec!["six".into()];
    let e = c.submit(&k, &other).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::IDEMPOTENCY_KEY_REUSE), "{e}");
}
