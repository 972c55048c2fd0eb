//! `execseam shell` driven as a person would, in a real terminal: tmux (send-keys, capture-pane).
//! One session covers the list: the prompt, a command and its output, a detach (Ctrl-P
//! Ctrl-Q) and `--attach` with the screen replayed, a resize followed by `stty size`, Ctrl-C
//! ending `sleep` with 130, `exit 3` making the CLI exit 3, SIGTERM, SIGHUP and SIGINT to the
//! CLI making it exit 143, 129 and 130, and the local terminal's settings (`stty -a`) the same
//! before and after each. Against emulators (`execseam emulate`): a shell whose emulator is
//! killed mid-session (a dropped connection) ends with a typed error (125) and the local terminal
//! restored; an adapter without terminals (Fly) is refused with 2, before any keystroke.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use execseam_test_util::daemon::Daemon;

const BIN: &str = env!("CARGO_BIN_EXE_execseam");

struct Tmux {
    sock: String,
}

impl Tmux {
    /// A 100x30 tmux window in `dir` running `sh` (prompt `outer> `) with `env` added.
    fn new(dir: &str, env: &[(String, String)]) -> Tmux {
        let tmux = Tmux {
            sock: format!("{dir}/tmux.sock"),
        };
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec![
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "100",
            "-y",
            "30",
            "env",
            "PS1=outer> ",
        ];
        args.extend(env.iter().map(String::as_str));
        args.push("sh");
        tmux.run(&args);
        tmux.run(&["set-option", "-g", "status", "off"]);
        tmux.wait_for("outer>");
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(args)
            .output()
            .expect("tmux is installed (the CI machine has it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, text: &str) {
        self.run(&["send-keys", "-t", "t", "-l", text]);
        self.run(&["send-keys", "-t", "t", "Enter"]);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t", "-S", "-200"])
    }

    /// Waits until the screen shows `want`.
    fn wait_for(&self, want: &str) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(want) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{want:?} never showed; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .arg("kill-server")
            .status();
    }
}

fn wait_file(p: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(p)
            && s.ends_with('\n')
        {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} never written",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_shell_in_tmux_runs_detaches_reattaches_resizes_interrupts_and_exits_with_the_remote_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let tmux = Tmux::new(&d, &[]);
    // The first attach: start a shell, run a command, detach.
    tmux.keys(&format!(
        "stty -a >{d}/before; {BIN} shell --adapter local --env PS1='re''mote$ ' -- sh -i 2>{d}/err1; echo $? >{d}/rc1"
    ));
    // (The typed line reads `re''mote`: only the remote prompt says `remote$`.)
    tmux.wait_for("remote$");
    tmux.keys("echo hi-$((40+2))");
    tmux.wait_for("hi-42");
    tmux.run(&["send-keys", "-t", "t", "C-p", "C-q"]);
    assert_eq!(
        wait_file(&dir.path().join("rc1")),
        "0\n",
        "a detach exits 0"
    );
    let err = std::fs::read_to_string(dir.path().join("err1")).unwrap();
    let attach = err
        .lines()
        .find_map(|l| l.split_once("reattach with: ").map(|(_, c)| c.to_owned()))
        .unwrap_or_else(|| panic!("no reattach hint in {err:?}"));
    let sandbox = attach
        .split_whitespace()
        .skip_while(|w| *w != "--sandbox")
        .nth(1)
        .expect("the hint names the sandbox")
        .to_owned();
    // Back in the outer shell, whose terminal is as it was.
    tmux.run(&["send-keys", "-t", "t", "clear", "Enter"]);
    tmux.wait_for("outer>");
    // The second attach replays the screen.
    let attach = attach.replacen("execseam", BIN, 1);
    tmux.keys(&format!("{attach}; echo rc=$? >{d}/rc; stty -a >{d}/after"));
    let replayed = tmux.wait_for("hi-42");
    assert!(replayed.contains("remote$ echo hi-$((40+2))"), "{replayed}");
    // A resize reaches the remote terminal.
    tmux.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys("echo size:$(stty size)");
    tmux.wait_for("size:40 120");
    // Ctrl-C ends a foreground `sleep` with 130.
    tmux.keys("sh -c 'printf \"zz%s\\n\" top; exec sleep 100'");
    tmux.wait_for("zztop");
    tmux.run(&["send-keys", "-t", "t", "C-c"]);
    tmux.keys("echo st:$?");
    tmux.wait_for("st:130");
    // `exit 3` is the CLI's status, and the local terminal is as it was.
    tmux.keys("exit 3");
    assert_eq!(wait_file(&dir.path().join("rc")), "rc=3\n");
    let after = wait_file(&dir.path().join("after"));
    let before = std::fs::read_to_string(dir.path().join("before")).unwrap();
    // Only the size differs (the window was resized).
    assert_eq!(
        settings(&before),
        settings(&after),
        "stty -a before and after"
    );
    // SIGTERM, SIGHUP or SIGINT to the CLI while attached: 128+n, and the local terminal
    // restored (the sandbox this run created goes, its command first).
    for (sig, code) in [("TERM", 143), ("HUP", 129), ("INT", 130)] {
        tmux.run(&["send-keys", "-t", "t", "clear", "Enter"]);
        for f in ["pid", "rc2", "after2"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        tmux.keys(&format!(
            "sh -c 'echo $$ >{d}/pid; exec {BIN} shell --adapter local --env PS1={sig}\\$\\  -- sh -i'; echo rc2=$? >{d}/rc2; stty -a >{d}/after2"
        ));
        tmux.wait_for(&format!("{sig}$"));
        let pid = wait_file(&dir.path().join("pid"));
        let killed = Command::new("kill")
            .args([&format!("-{sig}"), pid.trim()])
            .status()
            .unwrap();
        assert!(killed.success());
        assert_eq!(
            wait_file(&dir.path().join("rc2")),
            format!("rc2={code}\n"),
            "SIG{sig}"
        );
        let after2 = wait_file(&dir.path().join("after2"));
        assert_eq!(
            settings(&before),
            settings(&after2),
            "stty -a after a SIG{sig}"
        );
    }
    let destroyed = Command::new(BIN)
        .args(["sandbox", "destroy", "--adapter", "local", &sandbox])
        .status()
        .unwrap();
    assert!(destroyed.success());
}

/// `stty -a` without its first line (the speed and the size).
fn settings(s: &str) -> String {
    s.lines().skip(1).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_shell_whose_emulator_dies_ends_with_a_typed_error_and_the_terminal_restored() {
    let mut emu = Daemon::emulate(BIN, "e2b", "E2B_DOMAIN");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let tmux = Tmux::new(&d, &emu.env());
    tmux.keys(&format!(
        "stty -a >{d}/before; {BIN} shell --adapter e2b --env PS1='dr''op$ ' -- sh -i 2>{d}/err; echo rc=$? >{d}/rc; stty -a >{d}/after"
    ));
    tmux.wait_for("drop$");
    tmux.keys("echo up-$((40+2))");
    tmux.wait_for("up-42");
    // Every connection the CLI holds (its output stream, its keystrokes) drops at once.
    emu.kill();
    let rc = wait_file(&dir.path().join("rc"));
    let err = std::fs::read_to_string(dir.path().join("err")).unwrap();
    eprintln!("dropped: {err}");
    assert_eq!(
        rc, "rc=125\n",
        "an infrastructure failure, never an exit: {err}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("execseam: ") && l.contains("retry")),
        "one typed error line: {err:?}"
    );
    let before = std::fs::read_to_string(dir.path().join("before")).unwrap();
    let after = wait_file(&dir.path().join("after"));
    assert_eq!(
        settings(&before),
        settings(&after),
        "stty -a after the drop"
    );
}

#[test]
fn a_shell_on_an_adapter_without_terminals_is_refused_with_2() {
    // The Fly emulator's machine: process handles (spooled), no terminal (Fly Machines' exec has
    // no TTY: docs/processes.md). The refusal comes before anything is started or typed.
    let emu = Daemon::emulate(BIN, "fly", "EXECSEAM_SANDBOX");
    let out = Command::new(BIN)
        .args(["shell", "--adapter", "fly", "--", "sh"])
        .envs(emu.env())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        "execseam: adapter fly has no terminals (see docs/processes.md)"
    );
    assert!(out.stdout.is_empty());
}
