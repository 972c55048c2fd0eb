//! The runner is a standard libtest harness: `--list`, `--list --format terse` (what
//! `cargo nextest` reads), `--exact NAME` and name filters work, and a case that does not apply
//! is reported ignored with its reason, never passed. Proven by running this very binary as a
//! child with those arguments (the child runs the suite against the local adapter).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use execseam_conformance::libtest_mimic::Arguments;
use execseam_conformance::{Target, run_with_args};
use execseam_local::LocalExec;

const CHILD: &str = "EXECSEAM_RUNNER_CHILD";

fn local() -> Target {
    let dir = std::env::temp_dir()
        .canonicalize()
        .expect("a temp dir")
        .join(format!("execseam-runner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    Target::new("runner-selftest", Arc::new(LocalExec::new())).scratch(dir.to_str().unwrap())
}

fn child(args: &[&str]) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .env(CHILD, "1")
        .output()
        .expect("the runner runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn check(what: &str, ok: bool, text: &str, want: &[&str], not: &[&str]) -> Result<(), String> {
    for w in want {
        if !text.contains(w) {
            return Err(format!("{what}: the output lacks {w:?}:\n{text}"));
        }
    }
    for n in not {
        if text.contains(n) {
            return Err(format!("{what}: the output has {n:?}:\n{text}"));
        }
    }
    if !ok {
        return Err(format!("{what}: the runner failed:\n{text}"));
    }
    Ok(())
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        execseam_conformance::main(|| async { Ok(local()) });
    }
    let total = execseam_conformance::cases::all().len();
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut record = |r: Result<(), String>| match r {
        Ok(()) => passed += 1,
        Err(e) => failures.push(e),
    };

    // --list: every case, one `name: test` line each, and no sandbox is set up.
    let (ok, text) = child(&["--list"]);
    let lines = text.lines().filter(|l| l.ends_with(": test")).count();
    record(check(
        "--list",
        ok,
        &text,
        &[
            "command-validation: test",
            "tools-glob-snapshot: test",
            "lifecycle-nothing-left: test",
        ],
        &["conformance: adapter"],
    ));
    record(if lines == total {
        Ok(())
    } else {
        Err(format!(
            "--list printed {lines} tests, the suite has {total}"
        ))
    });
    // What nextest runs to discover tests.
    let (ok, text) = child(&["--list", "--format", "terse"]);
    record(check(
        "--list --format terse",
        ok,
        &text,
        &["exit-code-is-a-result: test"],
        &[],
    ));

    // --exact runs one case.
    let (ok, text) = child(&["--exact", "exit-code-is-a-result"]);
    record(check(
        "--exact",
        ok,
        &text,
        &[
            "test exit-code-is-a-result ... ok",
            &format!(
                "1 passed; 0 failed; 0 ignored; 0 measured; {} filtered out",
                total - 1
            ),
            "1 passed, 0 failed, 0 not applicable",
        ],
        &["test stdout-stderr-separate"],
    ));
    // A filter (what `cargo xtask conformance --adapter X -- FILTER` passes).
    let (ok, text) = child(&["stdout-stderr"]);
    record(check(
        "a filter",
        ok,
        &text,
        &["test stdout-stderr-separate ... ok"],
        &["test exit-code-is-a-result"],
    ));

    // Not applicable: ignored with the reason, never passed.
    let (ok, text) = child(&["--exact", "fault-auth"]);
    record(check(
        "an n/a case",
        ok,
        &text,
        &[
            "test fault-auth ... ignored (n/a: the target has no fault injector",
            "0 passed; 0 failed; 1 ignored",
            "0 passed, 0 failed, 1 not applicable",
        ],
        &["fault-auth ... ok"],
    ));

    // In-process: --list never calls the set-up.
    let called = Arc::new(AtomicBool::new(false));
    let c = called.clone();
    let summary = run_with_args(
        Arguments::from_iter(["runner", "--list", "--quiet"]),
        move || {
            c.store(true, Ordering::SeqCst);
            async { Ok(local()) }
        },
    );
    record(
        if !summary.set_up && !called.load(Ordering::SeqCst) && summary.code == 0 {
            Ok(())
        } else {
            Err(format!("--list set up a target or failed: {summary:?}"))
        },
    );

    for f in &failures {
        eprintln!("FAILED: {f}");
    }
    println!("{passed} passed, {} failed", failures.len());
    std::process::exit(i32::from(!failures.is_empty()));
}
