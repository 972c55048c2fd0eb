//! Every emulated target's conformance subset (the targets of `execseam-emulated`: each adapter
//! against its emulator, started in this process), under a `tracing` subscriber at TRACE that
//! captures every span and event of every crate (the adapters, their SDKs and HTTP/gRPC stacks,
//! the tools, the layers, the emulator itself) — with planted secrets: the API key the emulator
//! is started with (its `token`, and every credential it exports), env values, stdin, and file
//! contents written through the tools (`write`, `edit`, `apply_patch`, a failing `write`), a
//! sandbox-wide env value in a created sandbox's spec. None may appear in a captured line or in
//! any error's or result's `Display` or `Debug`.
//!
//! The subset: the exec cases that move env, stdin and argv (`env-honoured`, `stdin-roundtrip`,
//! `argv-roundtrip`, …), the file-writing tool cases (`tools-write-atomic`, `tools-edit`,
//! `tools-apply-patch-envelope`, `tools-errors-typed`) and the lifecycle cases, each as the
//! conformance suite runs it on the target (`Emulated::conformance`: the same sandbox, scratch
//! directory, missing id and variables as the conformance binary), plus the planted calls below.
//! The fault cases are the conformance binary's (`crates/emulated/tests/conformance.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_conformance::Outcome;
use execseam_core::{Command, Exec, SandboxSpec};
use execseam_emulated::Emulated;
use execseam_emulators::EmulatorOptions;
use execseam_tools::{ReadRange, Tools, WriteOptions};

const TOKEN: &str = "tok-PLANTED-conf-7a6b5c4d3e";
const ENV_SECRET: &str = "env-PLANTED-conf-2b3c4d5e";
const SPEC_ENV_SECRET: &str = "spec-PLANTED-conf-8d7c6b5a";
const STDIN_SECRET: &str = "stdin-PLANTED-conf-6f7a8b9c";
const FILE_SECRET: &str = "file-PLANTED-conf-0d1e2f3a";
const EDIT_SECRET: &str = "edit-PLANTED-conf-4b5c6d7e";
const PATCH_SECRET: &str = "patch-PLANTED-conf-8f9a0b1c";

const SUBSET: &[&str] = &[
    "stdout-stderr-separate",
    "stdin-roundtrip",
    "argv-roundtrip",
    "env-honoured",
    "env-baseline",
    "workdir-missing",
    "missing-program",
    "tools-write-atomic",
    "tools-edit",
    "tools-apply-patch-envelope",
    "tools-errors-typed",
    "lifecycle-declared",
    "lifecycle-create-exec-destroy",
    "lifecycle-list-by-label",
    "lifecycle-connect-sees-files",
    "lifecycle-destroy-idempotent",
];

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The planted calls: env, stdin, file contents through every writing tool, failures carrying
/// them. Returns the `Display` and `Debug` of every error and of the values the calls returned.
async fn planted(exec: &dyn Exec, scratch: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let tools = Tools::new(exec);
    let c = Command::builder(["sh", "-c", "printf %s \"$K\" | wc -c; wc -c"])
        .env("K", ENV_SECRET)
        .stdin(STDIN_SECRET)
        .build()
        .unwrap();
    match exec.exec(c).await {
        Ok(o) => seen.push(format!("{:?}", o.exit)),
        Err(e) => seen.push(format!("{e} {e:?}")),
    }
    // A failing exec carrying the env value and stdin (a workdir that does not exist).
    let c = Command::builder(["cat"])
        .env("K", ENV_SECRET)
        .stdin(STDIN_SECRET)
        .workdir("/no/such/execseam/dir")
        .build()
        .unwrap();
    if let Err(e) = exec.exec(c).await {
        seen.push(format!("{e} {e:?}"));
    }
    if exec.capabilities().stdin.is_supported() {
        let f = format!("{scratch}/planted.txt");
        let r = tools.write(&f, FILE_SECRET).await;
        seen.push(format!("{r:?}"));
        let r = tools.edit(&f, FILE_SECRET, EDIT_SECRET, false).await;
        seen.push(format!("{r:?}"));
        // Absent now: a typed error that must not quote the text it looked for.
        if let Err(e) = tools.edit(&f, FILE_SECRET, EDIT_SECRET, false).await {
            seen.push(format!("{e} {e:?}"));
        }
        let patch = format!(
            "*** Begin Patch\n*** Add File: planted-patch.txt\n+{PATCH_SECRET}\n*** Update File: planted.txt\n-{EDIT_SECRET}\n+{PATCH_SECRET}\n*** End Patch\n"
        );
        let r = tools.apply_patch(scratch, &patch).await;
        seen.push(format!("{r:?}"));
        // A failing patch and a failing write, both carrying file contents.
        let bad = format!(
            "*** Begin Patch\n*** Update File: planted.txt\n-not there\n+{PATCH_SECRET}\n*** End Patch\n"
        );
        if let Err(e) = tools.apply_patch(scratch, &bad).await {
            seen.push(format!("{e} {e:?}"));
        }
        let r = tools
            .write_with(
                "/proc/execseam-no/x",
                FILE_SECRET,
                WriteOptions {
                    create_parents: false,
                },
            )
            .await;
        if let Err(e) = r {
            seen.push(format!("{e} {e:?}"));
        }
        let back = tools.read(&f, ReadRange::All).await;
        assert_eq!(
            back.as_deref().ok(),
            Some(PATCH_SECRET.as_bytes()),
            "the planted file went through write, edit and apply_patch"
        );
    }
    seen
}

/// A sandbox created with a planted sandbox-wide env value, where the provider creates sandboxes
/// and takes one: the value reaches its commands; the sandbox is destroyed. Returns what the calls
/// returned (`Display` and `Debug`), and whether the value went in.
async fn planted_spec_env(
    name: &str,
    provider: &dyn execseam_core::Provider,
) -> (Vec<String>, bool) {
    let mut seen = Vec::new();
    match provider
        .create(SandboxSpec::new().with_env("K", SPEC_ENV_SECRET))
        .await
    {
        Ok(sandbox) => {
            let o = sandbox
                .exec(Command::new(["sh", "-c", "printf %s \"$K\" | wc -c"]).unwrap())
                .await;
            seen.push(format!("{o:?}"));
            let o = o.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&o.stdout).trim(),
                SPEC_ENV_SECRET.len().to_string(),
                "{name}: the spec's env value reached the command"
            );
            seen.push(format!("{:?}", sandbox.destroy().await));
            (seen, true)
        }
        Err(e) => {
            seen.push(format!("{e} {e:?}"));
            (seen, false)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_subset_at_trace_logs_no_planted_secret() {
    let captured = Captured::default();
    let w = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .with_writer(move || w.clone())
        .init();
    let all = execseam_conformance::cases::all();
    let subset: Vec<_> = all
        .iter()
        .filter(|c| SUBSET.contains(&c.name))
        .copied()
        .collect();
    assert_eq!(
        subset.len(),
        SUBSET.len(),
        "every case of the subset exists"
    );
    let mut ran = Vec::new();
    let mut spec_env = Vec::new();
    let targets = execseam_emulated::targets();
    for spec in &targets {
        let name = spec.name;
        let options = EmulatorOptions {
            token: Some(TOKEN.to_owned()),
            ..EmulatorOptions::default()
        };
        let emulated = Emulated::start(*spec, options)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let emu_env = emulated.emulator.env.clone();
        let exec: Arc<dyn Exec> = emulated.sandbox.clone();
        let sandbox = emulated.sandbox.clone();
        let provider = emulated.provider.clone();
        let scratch = emulated.scratch.clone();
        let target = emulated
            .conformance()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .proptest_cases(4);
        let report = execseam_conformance::run_cases(&target, &subset, None).await;
        let failed: Vec<_> = report
            .cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Fail(_)))
            .map(|c| format!("{}: {}", c.name, c.outcome))
            .collect();
        assert!(failed.is_empty(), "{name}: {failed:?}");
        let passed = report.passed();
        let mut seen = planted(&*exec, &scratch).await;
        let (more, created) = planted_spec_env(name, &*provider).await;
        seen.extend(more);
        if created {
            spec_env.push(name);
        }
        let _ = exec
            .exec(Command::new(["rm", "-rf", "--", &scratch]).unwrap())
            .await;
        drop(exec);
        // Created by the target: destroyed here (a connected default sandbox is the emulator's).
        if sandbox.owned() {
            let _ = sandbox.destroy().await;
        }
        drop((sandbox, provider));
        // The emulator stops with the target.
        drop(target);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut secrets: Vec<String> = [
            TOKEN,
            ENV_SECRET,
            SPEC_ENV_SECRET,
            STDIN_SECRET,
            FILE_SECRET,
            EDIT_SECRET,
            PATCH_SECRET,
        ]
        .map(str::to_owned)
        .to_vec();
        // The credentials the emulator hands out (whether or not it took the token).
        secrets.extend(
            emu_env
                .iter()
                .filter(|(k, v)| {
                    ["KEY", "TOKEN", "SECRET"].iter().any(|w| k.contains(w)) && v.len() >= 8
                })
                .map(|(_, v)| v.clone()),
        );
        // AWS's access key id is an identifier, not a secret (see tests/secrets.rs).
        let public: Vec<String> = emu_env
            .iter()
            .filter(|(k, _)| k == "AWS_ACCESS_KEY_ID")
            .map(|(_, v)| v.clone())
            .collect();
        secrets.retain(|s| !public.contains(s));
        let log = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
        assert!(
            log.contains(&format!("exec{{provider=\"{}\"", spec.adapter)),
            "{name}: no exec span captured"
        );
        for secret in &secrets {
            if let Some(line) = log.lines().find(|l| l.contains(secret.as_str())) {
                panic!("{name}: a captured trace line holds a planted secret: {line}");
            }
            for s in &seen {
                assert!(
                    !s.contains(secret.as_str()),
                    "{name}: an error or result holds a planted secret: {s}"
                );
            }
        }
        eprintln!(
            "{name}: {passed} cases passed, {} log bytes captured",
            log.len()
        );
        ran.push(name);
        captured.0.lock().unwrap().clear();
    }
    eprintln!("sandboxes created with a planted spec env: {spec_env:?}");
    assert_eq!(ran.len(), targets.len());
    assert!(
        spec_env.len() >= 5,
        "too few providers created a sandbox with the planted env: {spec_env:?}"
    );
}
