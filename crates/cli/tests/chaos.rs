//! `execseam chaos` and `execseam emulate --chaos`: the chaos proxy as a product. An agent's
//! command through a cut stream or a stalled answer gets a typed error (exit 125, one typed
//! line), never an exit code, and the proxy says which rule fired.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use execseam_test_util::daemon::Daemon;

const BIN: &str = env!("CARGO_BIN_EXE_execseam");

/// `execseam run ARGS` with `env`: (exit status, stdout, stderr).
fn run(args: &[&str], env: &[(String, String)]) -> (Option<i32>, String, String) {
    let o = Command::new(BIN)
        .arg("run")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (o.status.code(), text(o.stdout), text(o.stderr))
}

#[test]
fn execseam_chaos_in_front_of_an_emulator_cuts_and_stalls_the_stream() {
    let emu = Daemon::emulate(BIN, "e2b", "E2B_DOMAIN");
    let upstream = emu.var("E2B_API_URL");
    // The first command's output stream loses its end (the exit never comes); the second's
    // answer stalls after its head.
    let proxy = Daemon::start(
        BIN,
        &[
            "chaos",
            "--upstream",
            &upstream,
            "--rule",
            "POST /process.Process/Start#1=drop-last",
            "--rule",
            "POST /process.Process/Start#2=stall",
        ],
        |l| l.starts_with("# rule: POST /process.Process/Start#2=stall"),
    );
    let url = proxy.banner[0]
        .strip_prefix("chaos proxy listening on ")
        .and_then(|l| l.split_once(" -> "))
        .map(|(url, up)| {
            assert_eq!(up, upstream);
            url.to_owned()
        })
        .unwrap_or_else(|| panic!("{:?}", proxy.banner));
    let env: Vec<(String, String)> = emu
        .env()
        .into_iter()
        .map(|(k, v)| (k, v.replace(&upstream, &url)))
        .collect();

    let (code, out, err) = run(&["--adapter", "e2b", "--", "echo", "hi"], &env);
    // What streamed before the cut was the command's (`execseam run` streams); its end is not.
    assert_eq!(
        code,
        Some(125),
        "a cut stream is not an exit code: {out:?} {err}"
    );
    eprintln!("cut: {out:?} {err}");
    assert_eq!(err.lines().count(), 1, "one typed line: {err}");
    assert!(
        err.contains("protocol") && err.contains("retry unsafe"),
        "{err}"
    );
    let log = proxy.wait_stderr("-> drop-last");
    assert!(
        log.contains("chaos: POST /process.Process/Start -> drop-last"),
        "{log}"
    );

    let t = Instant::now();
    let (code, out, err) = run(
        &["--adapter", "e2b", "--timeout", "3", "--", "echo", "hi"],
        &env,
    );
    assert_eq!(
        code,
        Some(125),
        "a stalled answer is not an exit code: {out:?} {err}"
    );
    eprintln!("stall: {out:?} {err} after {:?}", t.elapsed());
    assert_eq!(err.lines().count(), 1, "one typed line: {err}");
    assert!(
        err.contains("timeout") && err.contains("retry unsafe"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let log = proxy.wait_stderr("-> stall");
    assert!(
        log.contains("chaos: POST /process.Process/Start -> stall"),
        "{log}"
    );

    // Untouched after the rules' counts: the third command runs.
    let (code, out, err) = run(&["--adapter", "e2b", "--", "echo", "hi"], &env);
    assert_eq!((code, out.as_str()), (Some(0), "hi\n"), "{err}");
}

#[test]
fn emulate_with_chaos_prints_the_proxys_address() {
    let emu = Daemon::start(
        BIN,
        &["emulate", "chrono", "--chaos", "POST /execute=truncate:40"],
        |l| l.starts_with("export CHRONO_TOKEN="),
    );
    let listening = emu
        .banner
        .iter()
        .find(|l| l.starts_with("chaos proxy listening on "));
    let proxy = listening
        .and_then(|l| l.strip_prefix("chaos proxy listening on "))
        .and_then(|l| l.split_once(" -> "))
        .map(|(p, _)| p.to_owned())
        .unwrap_or_else(|| panic!("{:?}", emu.banner));
    assert_eq!(
        emu.var("CHRONO_BASE_URL"),
        proxy,
        "the export points at the proxy"
    );
    let (code, out, err) = run(&["--adapter", "chrono", "--", "echo", "hi"], &emu.env());
    assert_eq!(
        code,
        Some(125),
        "a cut answer is not an exit code: {out:?} {err}"
    );
    assert_eq!(
        out, "",
        "a buffered answer cut short shows nothing of the command"
    );
    eprintln!("chrono: {err}");
    assert_eq!(err.lines().count(), 1, "one typed line: {err}");
    assert!(err.contains("retry unsafe"), "{err}");
    let log = emu.wait_stderr("-> truncate:40");
    assert!(log.contains("chaos: POST /execute -> truncate:40"), "{log}");
}

#[test]
fn bad_rules_and_upstreams_are_usage_errors() {
    for args in [
        &[
            "chaos",
            "--upstream",
            "http://127.0.0.1:9",
            "--rule",
            "POST /x=explode",
        ][..],
        &[
            "chaos",
            "--upstream",
            "https://example.com",
            "--rule",
            "*=stall",
        ][..],
        &["emulate", "e2b", "--chaos", "no-equals-sign"][..],
    ] {
        let o = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(!o.stderr.is_empty());
    }
}
