//! Chrono's full request against the emulator, through the adapter: `dependencies`,
//! `input_files`, `retrieve_files` with `output_type: "file"`, `env`, `network_enabled`, and
//! the fields no execseam server honours. The contract: Ornn `ornn-api/src/clients/
//! sandboxClient.ts` (every field, `RetrievedFile {path, content?, size?, error?}`), its
//! playground tool schema (`chatService.ts`: `retrieve_files` are globs relative to
//! `/workspace`, "only when output_type='file'"; npm dependencies "auto-installed before
//! execution"), Aevatar `NyxIdCodeExecutionPort.cs` (`DEPENDENCY_INSTALL_FAILED` is a 200 with
//! the output and a non-zero exit code), seed 004 (server-owned `NYXID_*` win).

use std::time::Duration;

use base64::Engine as _;
use execseam_chrono::{ChronoConfig, ChronoExec, DurableClient, DurablePolicy, Executed, Terminal};
use execseam_chrono_contract::wire::{
    self, ExecuteRequest, InputFile, Language, OutputType, RetrievedFile, codes,
};
use execseam_core::{ErrorKind, Exit, Retry};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::chrono::{ChronoEmulator, ChronoOptions};
use execseam_emulators::kit::sandbox::Isolation;

async fn emulator() -> ChronoEmulator {
    ChronoEmulator::start_with(EmulatorOptions::default(), ChronoOptions::default())
        .await
        .expect("the Chrono emulator starts")
}

fn config(emu: &ChronoEmulator) -> ChronoConfig {
    ChronoConfig::new(emu.base_url())
        .token(emu.token())
        .policy(DurablePolicy {
            default_retry_after: Duration::from_millis(100),
            ..DurablePolicy::default()
        })
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn key(name: &str) -> String {
    wire::operation_key(&[
        name.as_bytes(),
        format!("{:?}", std::time::SystemTime::now()).as_bytes(),
    ])
}

fn ran(e: Executed) -> (execseam_core::Output, Vec<RetrievedFile>) {
    match e {
        Executed::Ran { output, files } => (output, files),
        other => panic!("not Ran: {other:?}"),
    }
}

#[tokio::test]
async fn an_uninstallable_dependency_is_dependency_install_failed_and_the_program_never_runs() {
    let emu = emulator().await;
    let sync = ChronoExec::new(config(&emu)).unwrap();
    let mut req = ExecuteRequest::new(Language::Python, "print('the program ran')", 60);
    req.dependencies = vec!["not a valid requirement!!".into()];
    let Executed::DependenciesFailed { log, message } = sync.run(&req).await.unwrap() else {
        panic!("installed")
    };
    let text = String::from_utf8_lossy(&log.stderr);
    assert!(
        text.contains("not a valid requirement"),
        "pip's log: {text}"
    );
    assert_ne!(log.exit, Exit::Code(0));
    assert!(message.contains("pip"), "{message}");
    assert!(!String::from_utf8_lossy(&log.stdout).contains("the program ran"));
    // Where only an Output fits, it is a typed error, never the installer's exit as a result.
    let e = sync.execute(&req).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code(), e.retry()),
        (
            ErrorKind::InvalidCommand,
            Some(codes::DEPENDENCY_INSTALL_FAILED),
            Retry::Never
        )
    );
    // The durable path: a completed operation with the code and the log.
    let c = DurableClient::new(config(&emu)).unwrap();
    let t = c.run(&key("deps"), &req).await.unwrap();
    let Terminal::Ran { output, error, .. } = t else {
        panic!("{t:?}")
    };
    assert_eq!(
        error.map(|e| e.code),
        Some(codes::DEPENDENCY_INSTALL_FAILED.to_owned())
    );
    assert!(output.stderr.contains("not a valid requirement"));
    // Bash has no package manager: refused, typed, before anything runs.
    let mut req = ExecuteRequest::new(Language::Bash, "true", 60);
    req.dependencies = vec!["jq".into()];
    let e = sync.run(&req).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::INVALID_REQUEST), "{e}");
    // A dependency that would be an installer option is refused.
    let mut req = ExecuteRequest::new(Language::Python, "1", 60);
    req.dependencies = vec!["--index-url=http://example.invalid".into()];
    let e = sync.run(&req).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::INVALID_REQUEST), "{e}");
}

#[tokio::test]
async fn an_npm_dependency_from_an_input_file_installs_offline_and_the_program_uses_it() {
    let emu = emulator().await;
    let sync = ChronoExec::new(config(&emu)).unwrap();
    for (language, script) in [
        (Language::Javascript, "console.log(require('answer').x)"),
        (
            Language::Typescript,
            "import { x } from 'answer'; const y: number = x; console.log(y)",
        ),
    ] {
        let mut req = ExecuteRequest::new(language, script, 120);
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
        req.dependencies = vec!["/workspace/answer".into()];
        let (out, _) = ran(sync.run(&req).await.unwrap());
        assert_eq!(
            (String::from_utf8_lossy(&out.stdout).as_ref(), out.exit),
            ("42\n", Exit::Code(0)),
            "{language}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn retrieved_files_come_back_in_base64_with_sizes_and_typed_errors() {
    let emu = emulator().await;
    let sync = ChronoExec::new(config(&emu)).unwrap();
    let mut req = ExecuteRequest::new(
        Language::Bash,
        "printf '\\000\\377' > out.bin; mkdir -p d; echo a > d/a.txt; echo b > d/b.txt; \
         echo h > d/.hidden.txt; exit 3",
        60,
    );
    req.output_type = Some(OutputType::File);
    req.retrieve_files = vec![
        "out.bin".into(),
        "d/*.txt".into(),
        "/workspace/d/a.txt".into(),
        "missing.*".into(),
        "d".into(),
    ];
    let (out, files) = ran(sync.run(&req).await.unwrap());
    // Files come back after a failing program too.
    assert_eq!(out.exit, Exit::Code(3));
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
            ("d/a.txt", Some("YQo="), Some(2), None),
            ("d/b.txt", Some("Ygo="), Some(2), None),
            ("out.bin", Some("AP8="), Some(2), None),
            ("missing.*", None, None, Some("no such file")),
        ]
    );
    // `retrieve_files` without `output_type: "file"`, a pattern outside the working directory,
    // and the fields no execseam server honours: refused, typed, never ignored.
    let mut bad = ExecuteRequest::new(Language::Bash, "true", 60);
    bad.retrieve_files = vec!["out.bin".into()];
    let mut outside = ExecuteRequest::new(Language::Bash, "true", 60);
    outside.output_type = Some(OutputType::File);
    outside.retrieve_files = vec!["../etc/passwd".into()];
    let mut resources = ExecuteRequest::new(Language::Bash, "true", 60);
    resources.resources = Some(serde_json::json!({"cpu": "2"}));
    let mut image = ExecuteRequest::new(Language::Bash, "true", 60);
    image.image = Some("python:3.12".into());
    for r in [bad, outside, resources, image] {
        let e = sync.run(&r).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::InvalidCommand, Some(codes::INVALID_REQUEST)),
            "{r:?}: {e}"
        );
    }
}

#[tokio::test]
async fn network_disabled_leaves_loopback_only_and_server_owned_env_wins() {
    let emu = emulator().await;
    let sync = ChronoExec::new(config(&emu)).unwrap();
    // env reaches the program; the server-owned NYXID_* never come from the caller (seed 004).
    let mut req = ExecuteRequest::new(
        Language::Bash,
        "echo \"$GREETING ${NYXID_API_KEY:-unset} ${NYXID_BASE_URL:-unset}\"",
        60,
    );
    for (k, v) in [
        ("GREETING", "hello"),
        ("NYXID_API_KEY", "caller"),
        ("NYXID_BASE_URL", "http://caller"),
    ] {
        req.env.insert(k.into(), v.into());
    }
    let (out, _) = ran(sync.run(&req).await.unwrap());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello unset unset\n");
    let probe = "import errno, socket\n\
        s = socket.socket(); s.settimeout(5)\n\
        try:\n    s.connect(('10.255.255.1', 80)); print('reached')\n\
        except OSError as e:\n    print(errno.errorcode.get(e.errno, e))\n\
        l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n\
        socket.create_connection(l.getsockname()); print('loopback')\n";
    let mut req = ExecuteRequest::new(Language::Python, probe, 60);
    req.network_enabled = Some(false);
    if Isolation::detect() != Isolation::Namespaces {
        // Without namespaces (not root) there is no network namespace to give: refused.
        let e = sync.run(&req).await.unwrap_err();
        assert_eq!(e.code(), Some(codes::INVALID_REQUEST), "{e}");
        return;
    }
    let (out, _) = ran(sync.run(&req).await.unwrap());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ENETUNREACH\nloopback\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With the network off there is nothing to install from: refused, typed.
    req.dependencies = vec!["requests".into()];
    let e = sync.run(&req).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::INVALID_REQUEST), "{e}");
}

#[tokio::test]
async fn the_idempotency_hash_covers_every_field() {
    let emu = emulator().await;
    let c = DurableClient::new(config(&emu)).unwrap();
    let k = key("fields");
    let base = ExecuteRequest::new(Language::Python, "print(1)", 60);
    c.submit(&k, &base).await.unwrap();
    let mut variants = Vec::new();
    let mut r = base.clone();
    r.dependencies = vec!["six".into()];
    variants.push(r);
    let mut r = base.clone();
    r.output_type = Some(OutputType::File);
    variants.push(r);
    let mut r = base.clone();
    r.output_type = Some(OutputType::File);
    r.retrieve_files = vec!["*.png".into()];
    variants.push(r);
    let mut r = base.clone();
    r.network_enabled = Some(false);
    variants.push(r);
    for r in variants {
        let e = c.submit(&k, &r).await.unwrap_err();
        assert_eq!(e.code(), Some(codes::IDEMPOTENCY_KEY_REUSE), "{r:?}: {e}");
    }
    // The same payload is a replay.
    assert!(c.submit(&k, &base).await.is_ok());
}

/// Issue 38 (D22): a command that kills its whole process group (the adapter's wrapper with it,
/// as an OOM kill or a host envelope does) is the contract's ambiguous kill, not a protocol
/// error: the emulator reports the wrapper's death as 128 + 9, and the wrapper wrote no marker.
#[tokio::test]
async fn a_command_that_kills_its_whole_group_is_an_ambiguous_kill() {
    use execseam_core::Exec as _;
    use execseam_test_util::exec::command;
    let emu = emulator().await;
    let sync = ChronoExec::new(config(&emu)).unwrap();
    let out = sync
        .exec(command(["sh", "-c", "echo before; kill -9 0"]))
        .await
        .unwrap();
    assert!(out.exit.is_ambiguous_kill(), "{out:?}");
    assert_eq!(out.exit, Exit::Code(137));
}

/// Issue 38 (D22), pinned: Chrono's contract carries a death only as the int32 `exit_code`
/// (Aevatar `NyxIdCodeExecutionPort.cs`, Ornn `sandboxClient.ts`: no signal field), and the
/// program runs under the adapter's bash wrapper, whose status (with its end marker) is
/// `128 + n` for a program killed by signal `n`: a SIGSEGV reads `Code(139)` exactly as
/// `exit 139` does (no shell can tell them apart), a failure, not a kill; a SIGTERM reads
/// `Code(143)`, the contract's ambiguous kill. docs/adapters/chrono.md and docs/contract.md §3.
#[tokio::test]
async fn a_signal_death_reads_as_the_wrappers_128_plus_n() {
    use execseam_core::{Exec as _, ExitClass};
    use execseam_test_util::exec::command;
    let emu = emulator().await;
    let sync = ChronoExec::new(config(&emu)).unwrap();
    let run = |script: &'static str| sync.exec(command(["sh", "-c", script]));
    let (segv, code, term) = tokio::join!(
        run("echo out; kill -SEGV $$"),
        run("exit 139"),
        run("kill -TERM $$")
    );
    let (segv, code, term) = (segv.unwrap(), code.unwrap(), term.unwrap());
    assert_eq!(
        (segv.exit, &segv.stdout[..]),
        (Exit::Code(139), &b"out\n"[..])
    );
    assert_eq!(segv.exit.class(), ExitClass::Failure, "{segv:?}");
    assert_eq!(code.exit, segv.exit);
    assert_eq!(term.exit, Exit::Code(143));
    assert!(term.exit.is_ambiguous_kill(), "{term:?}");
}
