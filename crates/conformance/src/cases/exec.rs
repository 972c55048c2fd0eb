//! Exec behaviour: exit codes, separate streams, bytes, argv, workdir, env, kills, streaming.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use execseam_core::{
    Command, Deadline, Delivery, ErrorKind, Event, Exec, Exit, Output, Retry, Truncated,
};
use execseam_layers::ExecExt;
use proptest::prelude::*;

use super::{cmd, expect_err, fail, na, render, run_ok, same, sh, show, show_short};
use crate::{CaseResult, Outcome, Target, property, snapshot};

pub(crate) async fn command_validation(_t: &Target) -> CaseResult {
    let bad: Vec<(&str, Result<Command, execseam_core::Error>)> = vec![
        ("empty argv", Command::new(Vec::<String>::new())),
        ("empty program", Command::new([""])),
        ("NUL in argv", Command::new(["echo", "a\0b"])),
        (
            "relative workdir",
            Command::builder(["pwd"]).workdir("rel").build(),
        ),
        (
            "NUL in workdir",
            Command::builder(["pwd"]).workdir("/a\0").build(),
        ),
        (
            "empty env key",
            Command::builder(["env"]).env("", "v").build(),
        ),
        (
            "'=' in env key",
            Command::builder(["env"]).env("A=B", "v").build(),
        ),
        (
            "NUL in env value",
            Command::builder(["env"]).env("A", "\0").build(),
        ),
    ];
    for (what, r) in bad {
        match r {
            Ok(c) => return fail(format!("{what} was accepted: {c:?}")),
            Err(e) if e.kind() == ErrorKind::InvalidCommand => {}
            Err(e) => return fail(format!("{what}: kind {:?}, want InvalidCommand", e.kind())),
        }
    }
    Ok(())
}

async fn check_exit(exec: Arc<dyn Exec>, code: u8) -> Result<(), String> {
    let c = sh(&format!("exit {code}"));
    match exec.exec(c).await {
        Ok(o)
            if o.exit == Exit::Code(i32::from(code))
                && o.stdout.is_empty()
                && o.stderr.is_empty() =>
        {
            Ok(())
        }
        Ok(o) => Err(format!("exit {code}: got {}", render(&o))),
        Err(e) => Err(format!("exit {code}: got Err instead of an Ok result: {e}")),
    }
}

pub(crate) async fn exit_codes(t: &Target) -> CaseResult {
    for code in [0u8, 1, 2, 3, 42, 125, 126, 127, 128, 137, 143, 254, 255] {
        check_exit(t.exec.clone(), code)
            .await
            .map_err(Outcome::Fail)?;
    }
    let exec = t.exec.clone();
    property::check(t, any::<u8>, move |code| check_exit(exec.clone(), code)).await
}

pub(crate) async fn separate_streams(t: &Target) -> CaseResult {
    let o = run_ok(t, sh("printf o; printf e >&2; exit 3")).await?;
    snapshot::check("exec-separate-streams", &render(&o))
}

pub(crate) async fn fast_failure(t: &Target) -> CaseResult {
    let o = run_ok(t, sh("printf 'fatal: no such thing\\n' >&2; exit 1")).await?;
    same("stderr", &o.stderr, b"fatal: no such thing\n")?;
    same("stdout", &o.stdout, b"")?;
    if o.exit != Exit::Code(1) {
        return fail(format!("exit {:?}, want Code(1)", o.exit));
    }
    // A burst of stderr right before exiting must not be lost.
    let o = run_ok(t, sh("yes e | head -c 100000 >&2; exit 2")).await?;
    same("stderr", &o.stderr, &b"e\n".repeat(50_000))?;
    if o.exit != Exit::Code(2) {
        return fail(format!("exit {:?}, want Code(2)", o.exit));
    }
    Ok(())
}

pub(crate) async fn missing_program(t: &Target) -> CaseResult {
    let r = t.exec.exec(cmd(["execseam-no-such-program-7f3a"])).await;
    match r {
        Ok(o) if o.exit == Exit::Code(127) && !o.stderr.is_empty() && o.stdout.is_empty() => Ok(()),
        Ok(o) => fail(format!(
            "want exit 127 with a message on stderr, got {}",
            render(&o)
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => fail(format!("want exit 127 or Err(NotFound), got Err: {e}")),
    }
}

pub(crate) async fn binary_output(t: &Target) -> CaseResult {
    if !t.exec.capabilities().binary_output {
        return na("capabilities.binary_output = false (the transport decodes output as text)");
    }
    let o = run_ok(
        t,
        sh("printf 'a\\000b\\377c\\n'; printf '\\377\\000\\200' >&2"),
    )
    .await?;
    same("stdout", &o.stdout, b"a\0b\xffc\n")?;
    same("stderr", &o.stderr, b"\xff\0\x80")?;
    let all: Vec<u8> = (0..=255u8).collect();
    if t.exec.capabilities().stdin.is_supported() {
        let c = Command::builder(["cat"])
            .stdin(all.clone())
            .build()
            .expect("valid");
        let o = run_ok(t, c).await?;
        same("all 256 byte values through cat", &o.stdout, &all)?;
    }
    Ok(())
}

fn seq_bytes(from: u64, to: u64, limit: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(limit + 16);
    for n in from..=to {
        if v.len() >= limit {
            break;
        }
        v.extend_from_slice(n.to_string().as_bytes());
        v.push(b'\n');
    }
    v.truncate(limit);
    v
}

pub(crate) async fn large_output(t: &Target) -> CaseResult {
    const SIZE: usize = 8 << 20;
    if let Some(max) = t.exec.capabilities().max_output
        && max < SIZE as u64
    {
        return na(format!(
            "capabilities.max_output = {max} bytes, below 8 MiB"
        ));
    }
    let script =
        "seq 1 2000000 | head -c 8388608 & seq 3000000 5000000 | head -c 8388608 >&2; wait";
    let o = run_ok(t, sh(script)).await?;
    same("stdout", &o.stdout, &seq_bytes(1, 2_000_000, SIZE))?;
    same("stderr", &o.stderr, &seq_bytes(3_000_000, 5_000_000, SIZE))?;
    if !o.exit.success() {
        return fail(format!("exit {:?}", o.exit));
    }
    Ok(())
}

async fn check_cat(exec: Arc<dyn Exec>, input: Vec<u8>) -> Result<(), String> {
    let c = Command::builder(["cat"])
        .stdin(input.clone())
        .build()
        .expect("valid");
    match exec.exec(c).await {
        Ok(o) if o.stdout == input && o.exit.success() && o.stderr.is_empty() => Ok(()),
        Ok(o) => Err(format!(
            "cat of {} bytes gave exit {:?}, stdout {}, stderr {}",
            input.len(),
            o.exit,
            show_short(&o.stdout, 80),
            show_short(&o.stderr, 200)
        )),
        Err(e) => Err(format!("cat of {} bytes: {e}", input.len())),
    }
}

pub(crate) async fn stdin_roundtrip(t: &Target) -> CaseResult {
    let caps = t.exec.capabilities();
    if caps.stdin == Delivery::Unsupported {
        return na("capabilities.stdin = Unsupported");
    }
    let max = caps.max_stdin.unwrap_or(u64::MAX) as usize;
    // Where the transport decodes output as text (binary_output = false), bytes that are not
    // UTF-8 cannot come back through `cat`'s stdout whatever stdin does: prove stdin with text
    // there (binary-output-exact is the case about bytes).
    let text_only = !caps.binary_output;
    let mut fixed: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0xff],
        b"no newline".to_vec(),
        b"\r\n\0\n".to_vec(),
    ];
    // 1 MiB of a non-repeating pattern (or as much as the backend takes).
    let big: Vec<u8> = (0..(1usize << 20).min(max))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .map(|b| if text_only { b'!' + b % 94 } else { b })
        .collect();
    fixed.push(big);
    if text_only {
        fixed.retain(|v| std::str::from_utf8(v).is_ok());
    }
    for input in fixed {
        check_cat(t.exec.clone(), input)
            .await
            .map_err(Outcome::Fail)?;
    }
    let exec = t.exec.clone();
    let len = 0..4096usize.min(max);
    property::check(
        t,
        move || {
            if text_only {
                let chars = len.start..(len.end / 4).max(1);
                prop::collection::vec(any::<char>(), chars)
                    .prop_map(|cs| cs.into_iter().collect::<String>().into_bytes())
                    .boxed()
            } else {
                prop::collection::vec(any::<u8>(), len).boxed()
            }
        },
        move |input| check_cat(exec.clone(), input),
    )
    .await
}

pub(crate) async fn no_stdin(t: &Target) -> CaseResult {
    match tokio::time::timeout(Duration::from_secs(30), t.exec.exec(cmd(["cat"]))).await {
        Err(_) => fail("cat without stdin did not return within 30 s: stdin was not at EOF"),
        Ok(Err(e)) => fail(format!("cat without stdin: {e}")),
        Ok(Ok(o)) => {
            same("stdout", &o.stdout, b"")?;
            if !o.exit.success() {
                return fail(format!("exit {:?}, stderr {}", o.exit, show(&o.stderr)));
            }
            Ok(())
        }
    }
}

/// Strings that stress quoting: quotes, `$`, backticks, backslashes, newlines, globs, `=`, `~`,
/// `%`, leading dashes, unicode, empty.
fn nasty_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("$HOME".to_string()),
        Just("`id`".to_string()),
        Just("$(echo x)".to_string()),
        Just("\\".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("\t".to_string()),
        Just("*".to_string()),
        Just("~".to_string()),
        Just("=".to_string()),
        Just("-".to_string()),
        Just("--".to_string()),
        Just("!".to_string()),
        Just("%s".to_string()),
        Just(";&|<>(){}[]#".to_string()),
        Just("é✓🦀".to_string()),
        "[^\u{0}]{0,4}",
    ];
    prop::collection::vec(piece, 0..5).prop_map(|v| v.concat())
}

async fn check_argv(exec: Arc<dyn Exec>, args: Vec<String>) -> Result<(), String> {
    let c = Command::builder(["printf", "%s\\0"])
        .args(args.iter().cloned())
        .build()
        .expect("valid");
    let mut want = Vec::new();
    for a in &args {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    match exec.exec(c).await {
        Ok(o) if o.stdout == want && o.exit.success() => Ok(()),
        Ok(o) => Err(format!(
            "argv {args:?}: got stdout {} (exit {:?}, stderr {})",
            show(&o.stdout),
            o.exit,
            show(&o.stderr)
        )),
        Err(e) => Err(format!("argv {args:?}: {e}")),
    }
}

pub(crate) async fn argv_roundtrip(t: &Target) -> CaseResult {
    let fixed = vec![
        vec!["".to_string()],
        vec!["-n".into(), "--".into(), "-e".into()],
        vec![
            "a b".into(),
            "'".into(),
            "\"".into(),
            "\\n".into(),
            "\n".into(),
        ],
        vec![
            "$(touch /tmp/execseam-pwned)".into(),
            "`id`".into(),
            "*".into(),
            "~".into(),
        ],
        vec!["A=B".into(), "é✓🦀".into(), "%d".into()],
    ];
    for args in fixed {
        check_argv(t.exec.clone(), args)
            .await
            .map_err(Outcome::Fail)?;
    }
    let exec = t.exec.clone();
    property::check(
        t,
        || prop::collection::vec(nasty_string(), 1..6),
        move |args| check_argv(exec.clone(), args),
    )
    .await
}

pub(crate) async fn workdir(t: &Target) -> CaseResult {
    let dir = t.path("work dir 'é'");
    let o = run_ok(t, cmd(["mkdir", "-p", "--", &dir])).await?;
    if !o.exit.success() {
        return fail(format!("mkdir failed: {}", render(&o)));
    }
    let c = Command::builder(["pwd", "-P"])
        .workdir(&dir)
        .build()
        .expect("valid");
    let o = run_ok(t, c).await?;
    same("pwd -P", &o.stdout, format!("{dir}\n").as_bytes())?;
    // Relative paths resolve against the workdir.
    let c = Command::builder(["sh", "-c", "printf here > marker && cat ./marker"])
        .workdir(&dir)
        .build()
        .expect("valid");
    let o = run_ok(t, c).await?;
    same("cat ./marker", &o.stdout, b"here")
}

pub(crate) async fn workdir_missing(t: &Target) -> CaseResult {
    let c = Command::builder(["true"])
        .workdir(t.path("no such dir"))
        .build()
        .expect("valid");
    expect_err(
        "missing workdir",
        t.exec.exec(c).await,
        &[ErrorKind::NotFound],
        &[],
    )
    .map(drop)
}

pub(crate) async fn env(t: &Target) -> CaseResult {
    let tricky = "sp ace $HOME `id` 'q' \"d\" \\ é\nsecond line";
    let c = Command::builder(["printenv", "EXECSEAM_TRICKY"])
        .env("EXECSEAM_TRICKY", tricky)
        .build()
        .expect("valid");
    let o = run_ok(t, c).await?;
    same(
        "printenv EXECSEAM_TRICKY",
        &o.stdout,
        format!("{tricky}\n").as_bytes(),
    )?;

    let c = Command::builder(["sh", "-c", "printf '%s' \"${EXECSEAM_EMPTY-unset}\""])
        .env("EXECSEAM_EMPTY", "")
        .build()
        .expect("valid");
    let o = run_ok(t, c).await?;
    same("an empty value is set, not unset", &o.stdout, b"")?;

    let c = Command::builder(["env"])
        .env("EXECSEAM-DASHED.key", "v=1")
        .build()
        .expect("valid");
    let o = run_ok(t, c).await?;
    let text = String::from_utf8_lossy(&o.stdout);
    if !text.lines().any(|l| l == "EXECSEAM-DASHED.key=v=1") {
        return fail(format!(
            "`env` does not list EXECSEAM-DASHED.key=v=1:\n{text}"
        ));
    }
    Ok(())
}

pub(crate) async fn env_baseline(t: &Target) -> CaseResult {
    let o = run_ok(t, sh("printf '%s' \"$PATH\"")).await?;
    if o.stdout.is_empty() {
        return fail("PATH is empty in the base environment");
    }
    let c = Command::builder(["/bin/sh", "-c", "printf '%s' \"$PATH\""])
        .env("PATH", "/usr/bin:/bin:/execseam-test")
        .build()
        .expect("valid");
    let o = run_ok(t, c).await?;
    same(
        "PATH overridden by Command.env",
        &o.stdout,
        b"/usr/bin:/bin:/execseam-test",
    )
}

pub(crate) async fn kill_signals(t: &Target) -> CaseResult {
    if let Some(why) = &t.signal_deaths_unnamed {
        // No exit can be told honestly: the death must be an error.
        if let Ok(o) = t.exec.exec(sh("kill -9 $$")).await {
            return fail(format!(
                "kill -9 $$: a signal death the provider does not name became {:?}",
                o.exit
            ));
        }
        return na(format!("the provider does not name a signal death: {why}"));
    }
    for (sig, code) in [(9, 137), (15, 143)] {
        let o = run_ok(t, sh(&format!("kill -{sig} $$"))).await?;
        if o.exit != Exit::Code(code) && o.exit != Exit::Signal(sig) {
            return fail(format!(
                "kill -{sig} $$: exit {:?}, want Code({code}) or Signal({sig})",
                o.exit
            ));
        }
        if !o.exit.is_ambiguous_kill() {
            return fail(format!(
                "{:?} is not classified as an ambiguous kill",
                o.exit
            ));
        }
    }
    Ok(())
}

pub(crate) async fn concurrent(t: &Target) -> CaseResult {
    let runs = (0..4).map(|i| {
        let exec = t.exec.clone();
        async move {
            let c = Command::builder([
                "sh",
                "-c",
                "printf '%s' \"$1\"; sleep 1; printf '%s' \"$1\" >&2",
                "sh",
            ])
            .arg(format!("id-{i}"))
            .build()
            .expect("valid");
            (i, exec.exec(c).await)
        }
    });
    let handles: Vec<_> = runs.map(tokio::spawn).collect();
    for h in handles {
        let (i, r) = h
            .await
            .map_err(|e| Outcome::Fail(format!("task failed: {e}")))?;
        let o = r.map_err(|e| Outcome::Fail(format!("exec {i}: {e}")))?;
        let want = format!("id-{i}");
        same(&format!("stdout of exec {i}"), &o.stdout, want.as_bytes())?;
        same(&format!("stderr of exec {i}"), &o.stderr, want.as_bytes())?;
    }
    Ok(())
}

/// `true` on `exec` fails within 60 s as one of `kinds`, with one of `retries` (any when empty).
async fn true_fails(
    exec: &dyn Exec,
    what: &str,
    kinds: &[ErrorKind],
    retries: &[Retry],
) -> CaseResult {
    let r = tokio::time::timeout(Duration::from_secs(60), exec.exec(cmd(["true"])))
        .await
        .or_else(|_| fail("no answer within 60 s"))?;
    expect_err(what, r, kinds, retries).map(drop)
}

pub(crate) async fn dead_endpoint(t: &Target) -> CaseResult {
    let Some(dead) = &t.dead_endpoint else {
        return na("the target has no remote endpoint to take away");
    };
    true_fails(&**dead, "dead endpoint", &[ErrorKind::Unavailable], &[]).await
}

pub(crate) async fn vanished_sandbox(t: &Target) -> CaseResult {
    let Some(gone) = &t.vanished_sandbox else {
        return na("the target has no sandbox that can vanish");
    };
    let kinds = [ErrorKind::NotFound];
    true_fails(&**gone, "vanished sandbox", &kinds, &[Retry::Never]).await
}

pub(crate) async fn streaming_declared(t: &Target) -> CaseResult {
    let declared = t.exec.capabilities().streaming;
    let offered = t.exec.streaming().is_some();
    if declared != offered {
        return fail(format!(
            "capabilities.streaming = {declared} but streaming() is {}",
            if offered { "Some" } else { "None" }
        ));
    }
    Ok(())
}

pub(crate) async fn streaming_matches(t: &Target) -> CaseResult {
    let Some(streaming) = t.exec.streaming() else {
        return na("capabilities.streaming = false");
    };
    let script = "for i in 1 2 3; do printf \"out$i \"; printf \"err$i \" >&2; done; head -c 300000 /dev/zero | tr '\\0' z; exit 5";
    let mut stream = streaming
        .exec_stream(sh(script))
        .await
        .or_else(|e| fail(format!("exec_stream: {e}")))?;
    let (mut out, mut err) = (BytesMut::new(), BytesMut::new());
    let mut exits = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Stdout(b)) if exits.is_empty() => out.extend_from_slice(&b),
            Ok(Event::Stderr(b)) if exits.is_empty() => err.extend_from_slice(&b),
            Ok(Event::Exit(x)) => exits.push(x),
            Ok(ev) => return fail(format!("an event after the exit: {ev:?}")),
            Err(e) => return fail(format!("stream error: {e}")),
        }
    }
    if exits != [Exit::Code(5)] {
        return fail(format!("want exactly one exit, Code(5), got {exits:?}"));
    }
    let buffered = run_ok(t, sh(script)).await?;
    same("streamed stdout vs buffered", &out, &buffered.stdout)?;
    same("streamed stderr vs buffered", &err, &buffered.stderr)?;
    let mut want = b"out1 out2 out3 ".to_vec();
    want.extend(std::iter::repeat_n(b'z', 300_000));
    same("stdout", &out, &want)?;
    same("stderr", &err, b"err1 err2 err3 ")
}

pub(crate) async fn deadline(t: &Target) -> CaseResult {
    let caps = t.exec.capabilities();
    let pidfile = t.path("deadline.pid");
    let limit = Duration::from_secs(3);
    let script = format!("echo $$ > '{pidfile}'; echo start; exec sleep 60");
    let guarded = (&*t.exec).with_deadline(limit);
    let started = Instant::now();
    let r = guarded.exec(sh(&script)).await;
    let elapsed = started.elapsed();
    let mut e = expect_err(
        "deadline",
        r,
        &[ErrorKind::Timeout(Deadline::Command)],
        &[Retry::Unsafe],
    )?;
    if elapsed > limit + Duration::from_secs(10) {
        return fail(format!(
            "the deadline of {limit:?} returned only after {elapsed:?}"
        ));
    }
    if caps.streaming {
        let partial = e.take_partial().unwrap_or_default();
        if !partial.stdout.starts_with(b"start") {
            return fail(format!(
                "partial stdout {} should hold `start`",
                show(&partial.stdout)
            ));
        }
    }
    if !caps.remote_kill {
        return Ok(()); // the backend cannot kill: nothing more to prove (stated in its docs)
    }
    // The command must be gone (E2B#500: a command outliving the client's timeout). A pid equal
    // to the checking shell's own is not the command: a backend that runs every command in a
    // fresh container repeats pids.
    let check = format!(
        "pid=$(cat '{pidfile}') && if [ \"$pid\" != \"$$\" ] && kill -0 \"$pid\" 2>/dev/null; then echo alive; else echo gone; fi"
    );
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let o = run_ok(t, sh(&check)).await?;
        if o.stdout.as_ref() == b"gone\n" {
            return Ok(());
        }
        if Instant::now() > until {
            return fail(format!(
                "15 s after the deadline the command is still there: {}",
                render(&o)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub(crate) async fn output_cap(t: &Target) -> CaseResult {
    let capped = (&*t.exec).with_output_cap(1000);
    let o: Output = capped
        .exec(sh("yes | head -c 100000; printf err >&2"))
        .await
        .or_else(|e| fail(format!("capped exec: {e}")))?;
    same("capped stdout", &o.stdout, &b"y\n".repeat(500))?;
    same("stderr under the cap", &o.stderr, b"err")?;
    if o.truncated
        != (Truncated {
            stdout: 99_000,
            stderr: 0,
        })
    {
        return fail(format!(
            "truncated {:?}, want stdout 99000, stderr 0",
            o.truncated
        ));
    }
    Ok(())
}
