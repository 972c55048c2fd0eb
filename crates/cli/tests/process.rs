//! `execseam process …` through the built binary, each step a different `execseam` process:
//! `start` (long gone when the others run), `logs --follow` and `wait` in others; a follower
//! killed with SIGKILL leaves the command running and its output recoverable from offsets;
//! stdin written by two `write` processes; `kill` reaches the process group; usage errors exit 2.
//! Against the local adapter (its sandboxes are directories on this host; the spool's
//! supervisor is in a session of its own, so it outlives every `execseam` process here).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn execseam(args: &[&str]) -> std::process::Output {
    execseam_with(args, b"")
}

/// `execseam <args>` started (its stdout and stderr piped), outside any `EXECSEAM_SANDBOX`.
fn spawn(args: &[&str], stdin: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(args)
        .env_remove("EXECSEAM_SANDBOX")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn execseam_with(args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = spawn(args, Stdio::piped());
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A local sandbox for the test, destroyed when dropped.
struct Sandbox(String);

impl Sandbox {
    fn new() -> Sandbox {
        let out = execseam(&["sandbox", "create", "--adapter", "local"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        Sandbox(text(&out.stdout).trim().to_owned())
    }

    /// `execseam process <sub> --adapter local --sandbox <id> <rest…>`.
    fn process(&self, sub: &str, rest: &[&str]) -> std::process::Output {
        self.process_with(sub, rest, b"")
    }

    fn process_with(&self, sub: &str, rest: &[&str], stdin: &[u8]) -> std::process::Output {
        execseam_with(&self.process_args(sub, rest), stdin)
    }

    fn process_args<'a>(&'a self, sub: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["process", sub, "--adapter", "local", "--sandbox", &self.0];
        args.extend_from_slice(rest);
        args
    }

    /// [`Sandbox::process`] as a child process left running, its stdout and stderr piped.
    fn spawn_process(&self, sub: &str, rest: &[&str]) -> std::process::Child {
        spawn(&self.process_args(sub, rest), Stdio::null())
    }

    /// `execseam run --adapter local --sandbox <id> -- <argv…>`.
    fn run(&self, argv: &[&str]) -> std::process::Output {
        let mut args = vec!["run", "--adapter", "local", "--sandbox", &self.0, "--"];
        args.extend_from_slice(argv);
        execseam(&args)
    }

    /// Whether the file `name` exists in the sandbox's working directory (where the started
    /// commands' relative paths land).
    fn exists(&self, name: &str) -> bool {
        self.run(&["test", "-e", name]).status.code() == Some(0)
    }

    fn touch(&self, name: &str) {
        let r = self.run(&["touch", name]);
        assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = execseam(&["sandbox", "destroy", "--adapter", "local", &self.0]);
    }
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn start_then_follow_wait_and_a_sigkilled_follower_from_other_processes() {
    let sb = Sandbox::new();
    let script = "printf 'one\\n'; printf 'e1\\n' >&2; \
                  while [ ! -e go ]; do sleep 0.05; done; \
                  printf 'two\\n'; printf 'e2\\n' >&2; : > wrote-two; \
                  while [ ! -e end ]; do sleep 0.05; done; printf 'three\\n'; exit 7";
    let started = sb.process("start", &["--key", "job", "--", "sh", "-c", script]);
    assert_eq!(started.status.code(), Some(0), "{}", text(&started.stderr));
    let handle = text(&started.stdout).trim().to_owned();
    assert!(!handle.is_empty());
    // The same key starts nothing and names the same handle.
    let again = sb.process(
        "start",
        &["--key", "job", "--json", "--", "sh", "-c", "exit 99"],
    );
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["handle"], handle.as_str());
    assert_eq!(again["fresh"], false);

    // A follower in another process, killed with SIGKILL mid-way.
    let mut follower = sb.spawn_process("logs", &[&handle, "--follow"]);
    until("the command wrote its first line", || {
        text(&sb.process("logs", &[&handle]).stdout) == "one\n"
    });
    follower.kill().unwrap(); // SIGKILL
    let _ = follower.wait();

    // The command runs on with nobody attached, and writes.
    sb.touch("go");
    until("the command wrote while nobody followed", || {
        sb.exists("wrote-two")
    });
    let listed = sb.process("list", &[]);
    assert_eq!(
        text(&listed.stdout),
        format!("{handle}\tjob\trunning\n"),
        "{}",
        text(&listed.stderr)
    );
    // Output from mid offsets, each stream exact.
    let mid = sb.process(
        "logs",
        &[&handle, "--stdout-from", "4", "--stderr-from", "3"],
    );
    assert_eq!(
        (text(&mid.stdout), text(&mid.stderr)),
        ("two\n".to_owned(), "e2\n".to_owned())
    );
    // wait with a deadline: still running is 124.
    let early = sb.process("wait", &[&handle, "--timeout", "0.2"]);
    assert_eq!(early.status.code(), Some(124), "{}", text(&early.stderr));

    // A new follower from the start, and a waiter, both in processes that did not start it.
    let follow = sb.spawn_process("logs", &[&handle, "--follow"]);
    let waiter = sb.spawn_process("wait", &[&handle]);
    sb.touch("end");
    let followed = follow.wait_with_output().unwrap();
    assert_eq!(
        followed.status.code(),
        Some(7),
        "{}",
        text(&followed.stderr)
    );
    assert_eq!(text(&followed.stdout), "one\ntwo\nthree\n");
    assert_eq!(text(&followed.stderr), "e1\ne2\n");
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(waited.status.code(), Some(7), "{}", text(&waited.stderr));

    let listed = sb.process("list", &["--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["state"], "exited");
    assert_eq!(listed[0]["exit_code"], 7);
    assert_eq!(listed[0]["stdout_bytes"], 14);
}

#[test]
fn stdin_from_two_writers_and_kill_reaches_the_group() {
    let sb = Sandbox::new();
    let started = sb.process(
        "start",
        &[
            "--stdin",
            "--",
            "sh",
            "-c",
            "while IFS= read -r l; do echo \"got:$l\"; done; echo end",
        ],
    );
    assert_eq!(started.status.code(), Some(0), "{}", text(&started.stderr));
    let handle = text(&started.stdout).trim().to_owned();
    let w = sb.process_with("write", &[&handle], b"a\nb");
    assert_eq!(
        (w.status.code(), text(&w.stdout)),
        (Some(0), "3\n".to_owned()),
        "{}",
        text(&w.stderr)
    );
    // The second writer does not know the count: it continues where the first stopped.
    let w = sb.process_with("write", &[&handle, "--close"], b"c\n");
    assert_eq!(text(&w.stdout), "5\n", "{}", text(&w.stderr));
    // A stale offset is a conflict (125), never a second copy of the bytes.
    let stale = sb.process_with("write", &[&handle, "--at", "0"], b"x");
    assert_eq!(stale.status.code(), Some(125));
    let waited = sb.process("wait", &[&handle, "--timeout", "20"]);
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited.stderr));
    let logs = sb.process("logs", &[&handle]);
    assert_eq!(text(&logs.stdout), "got:a\ngot:bc\nend\n");

    // kill: TERM to the group ends a script and its background child.
    let started = sb.process(
        "start",
        &["--", "sh", "-c", "sleep 300 & echo $! > child; wait"],
    );
    let handle = text(&started.stdout).trim().to_owned();
    until("the child started", || sb.exists("child"));
    let k = sb.process("kill", &[&handle, "--signal", "TERM"]);
    assert_eq!(k.status.code(), Some(0), "{}", text(&k.stderr));
    let waited = sb.process("wait", &[&handle, "--timeout", "20"]);
    assert_eq!(waited.status.code(), Some(143), "{}", text(&waited.stderr));
    // Gone, or a zombie its new parent has not reaped yet (dead all the same).
    until("the background child is dead", || {
        let r = execseam(&[
            "run",
            "--adapter",
            "local",
            "--sandbox",
            &sb.0,
            "--",
            "sh",
            "-c",
            "p=$(cat child); ! kill -0 $p 2>/dev/null || grep -q '^State:.Z' /proc/$p/status",
        ]);
        r.status.code() == Some(0)
    });
}

#[test]
fn usage_errors_exit_2() {
    let sb = Sandbox::new();
    let bad_key = sb.process("start", &["--key", "no spaces", "--", "true"]);
    assert_eq!(bad_key.status.code(), Some(2), "{}", text(&bad_key.stderr));
    let garbage = sb.process("wait", &["not-a-handle"]);
    assert_eq!(garbage.status.code(), Some(2), "{}", text(&garbage.stderr));
    let bad_signal = sb.process("kill", &["not-a-handle", "--signal", "NOPE"]);
    assert_eq!(bad_signal.status.code(), Some(2));
}
