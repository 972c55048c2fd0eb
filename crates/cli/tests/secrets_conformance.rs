//! Every emulated adapter's conformance subset, in this process, under a `tracing` subscriber at
//! TRACE that captures every span and event of every crate (the adapters, their SDKs and HTTP/gRPC
//! stacks, the tools, the layers) — with planted secrets: the API key the emulator is started with
//! (`execseam emulate P --token`, and every credential it exports), env values, stdin, and file
//! contents written through the tools (`write`, `edit`, `apply_patch`, a failing `write`), a
//! sandbox-wide env value in a created sandbox's spec. None may appear in a captured line, in the
//! emulator's own trace log, or in any error's `Display` or `Debug`.
//!
//! The subset: the exec cases that move env, stdin and argv (`env-honoured`, `stdin-roundtrip`,
//! `argv-roundtrip`, …), the file-writing tool cases (`tools-write-atomic`, `tools-edit`,
//! `tools-apply-patch-envelope`, `tools-errors-typed`) and the lifecycle cases, each as the
//! conformance suite runs it, plus the planted calls below. The fault cases need an in-process
//! emulator's fault injector and are covered by each adapter's own conformance run. Chrono (a
//! fresh sandbox per execution) gets the host mount its own conformance test sets up
//! (`execseam emulate chrono --mount HOST:/mnt/execseam-conformance`), so its files outlive a
//! command and it runs every case and every planted call too, in the mounted scratch.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_conformance::{Outcome, Target};
use execseam_core::{Command, Exec, SandboxSpec};
use execseam_tools::{ReadRange, Tools, WriteOptions};

const TOKEN: &str = "tok-PLANTED-conf-7a6b5c4d3e";
const ENV_SECRET: &str = "env-PLANTED-conf-2b3c4d5e";
const SPEC_ENV_SECRET: &str = "spec-PLANTED-conf-8d7c6b5a";
const STDIN_SECRET: &str = "stdin-PLANTED-conf-6f7a8b9c";
const FILE_SECRET: &str = "file-PLANTED-conf-0d1e2f3a";
const EDIT_SECRET: &str = "edit-PLANTED-conf-4b5c6d7e";
const PATCH_SECRET: &str = "patch-PLANTED-conf-8f9a0b1c";

/// Where chrono's scratch directory (a host directory) appears inside every sandbox.
const CHRONO_SCRATCH: &str = "/mnt/execseam-conformance";

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

struct Emu {
    child: Child,
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
}

impl Drop for Emu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `execseam emulate P --token TOKEN [EXTRA]` at trace (its log to a file); its exports.
fn emulate(provider: &str, dir: &std::path::Path, extra: &[String]) -> Emu {
    let log = dir.join(format!("{provider}-emulator.log"));
    let mut child = Process::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["emulate", provider, "--token", TOKEN])
        .args(extra)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            if tx.send(l.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the emulator starts");
    assert!(first.contains("listening"), "{first}");
    let mut env = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(700)) {
        if let Some(kv) = l.strip_prefix("export ") {
            let (k, v) = kv.split_once('=').unwrap();
            env.push((k.to_owned(), v.trim_matches('\'').to_owned()));
        }
    }
    assert!(!env.is_empty(), "{provider}: no exports");
    Emu { child, env, log }
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
    let dir = std::env::temp_dir().join(format!("execseam-secrets-conf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
    for provider in execseam_emulators::providers().iter() {
        // Chrono runs every execution in a fresh sandbox (docs/adapters/chrono.md, Lifecycle):
        // a file written by one command is gone for the next, so the tool cases (a fixture
        // written, then read) and the planted file calls need a scratch directory that outlives
        // a command: a host directory mounted into every sandbox, as chrono's own conformance
        // test (crates/adapter-chrono/tests/conformance.rs) mounts one.
        let mut extra = Vec::new();
        let mut scratch = format!("/tmp/execseam-secrets-conf-{}", std::process::id());
        if *provider == "chrono" {
            let host = dir.join("chrono-scratch");
            std::fs::create_dir_all(&host).unwrap();
            scratch = CHRONO_SCRATCH.to_owned();
            extra = vec![
                "--mount".to_owned(),
                format!("{}:{CHRONO_SCRATCH}", host.display()),
            ];
        }
        let emu = emulate(provider, &dir, &extra);
        let mut vars: BTreeMap<String, String> = emu.env.iter().cloned().collect();
        // Fly machines need an image; the emulator takes any (the fly conformance test's).
        vars.entry("EXECSEAM_FLY_IMAGE".into())
            .or_insert_with(|| "debian:stable".into());
        let prov: Arc<dyn execseam_core::Provider> =
            Arc::from(execseam::provider_from(provider, &vars).unwrap());
        // A created sandbox with a planted sandbox-wide env value where the provider takes one;
        // else one without; else (connect-only providers) the emulator's default sandbox.
        let mut sandbox = None;
        for spec in [
            SandboxSpec::new().with_env("K", SPEC_ENV_SECRET),
            SandboxSpec::new(),
        ] {
            match prov.create(spec).await {
                Ok(s) => {
                    sandbox = Some(s);
                    break;
                }
                Err(e) => {
                    let text = format!("{e} {e:?}");
                    assert!(!text.contains(SPEC_ENV_SECRET), "{provider}: {text}");
                }
            }
        }
        if sandbox.is_none()
            && let Some(id) = vars.get("EXECSEAM_SANDBOX")
        {
            sandbox = Some(prov.connect(id).await.unwrap());
        }
        let sandbox = sandbox.unwrap_or_else(|| panic!("{provider}: no sandbox"));
        let sandbox: Arc<dyn execseam_core::Sandbox> = Arc::from(sandbox);
        let exec: Arc<dyn Exec> = sandbox.clone();
        let mut target = Target::new(format!("secrets-{provider}"), exec.clone())
            .provider(prov.clone())
            .scratch(scratch.clone())
            .proptest_cases(4);
        if *provider == "modal" {
            // Modal checks an id's form first (as its own conformance test configures).
            target = target.missing_sandbox_id("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV");
        }
        let cases = subset.clone();
        let report = execseam_conformance::run_cases(&target, &cases, None).await;
        let failed: Vec<_> = report
            .cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Fail(_)))
            .map(|c| format!("{}: {}", c.name, c.outcome))
            .collect();
        assert!(failed.is_empty(), "{provider}: {failed:?}");
        let passed = report.passed();
        let seen = planted(&*exec, &scratch).await;
        let _ = exec
            .exec(Command::new(["rm", "-rf", "--", &scratch]).unwrap())
            .await;
        drop(target);
        drop(exec);
        // Created here: destroyed here (a connected default sandbox is the emulator's).
        if sandbox.owned() {
            let _ = sandbox.destroy().await;
        }
        drop(sandbox);
        // Let the emulator write its last lines.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let emu_env = emu.env.clone();
        let emu_log = emu.log.clone();
        drop(emu);
        let emulator = std::fs::read_to_string(&emu_log).unwrap();
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
            log.contains(&format!("exec{{provider=\"{provider}\"")),
            "{provider}: no exec span captured"
        );
        for secret in &secrets {
            if let Some(line) = log.lines().find(|l| l.contains(secret.as_str())) {
                panic!("{provider}: a captured trace line holds a planted secret: {line}");
            }
            if let Some(line) = emulator.lines().find(|l| l.contains(secret.as_str())) {
                panic!("{provider}: the emulator logged a planted secret: {line}");
            }
            for s in &seen {
                assert!(
                    !s.contains(secret.as_str()),
                    "{provider}: an error or result holds a planted secret: {s}"
                );
            }
        }
        eprintln!(
            "{provider}: {passed} cases passed, {} log bytes captured, {} emulator log bytes",
            log.len(),
            emulator.len()
        );
        ran.push(*provider);
        captured.0.lock().unwrap().clear();
    }
    assert_eq!(ran.len(), execseam_emulators::providers().len());
    let _ = std::fs::remove_dir_all(&dir);
}
