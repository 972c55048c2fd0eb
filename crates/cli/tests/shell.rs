//! `execseam shell` driven as a person would, in a real terminal: tmux (send-keys, capture-pane).
//! One session covers the list: the prompt, a command and its output, a detach (Ctrl-P
//! Ctrl-Q) and `--attach` with the screen replayed, a resize followed by `stty size`, Ctrl-C
//! ending `sleep` with 130, `exit 3` making the CLI exit 3, SIGTERM to the CLI making it exit
//! 143, and the local terminal's settings (`stty -a`) the same before and after each.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_execseam");

struct Tmux {
    sock: String,
}

impl Tmux {
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
    let tmux = Tmux {
        sock: format!("{d}/tmux.sock"),
    };
    tmux.run(&[
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
        "sh",
    ]);
    tmux.run(&["set-option", "-g", "status", "off"]);
    tmux.wait_for("outer>");
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
    let settings = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(
        settings(&before),
        settings(&after),
        "stty -a before and after"
    );
    // SIGTERM to the CLI while attached: 143, and the local terminal restored.
    tmux.run(&["send-keys", "-t", "t", "clear", "Enter"]);
    tmux.keys(&format!(
        "sh -c 'echo $$ >{d}/pid; exec {BIN} shell --adapter local --env PS1=again\\$\\  -- sh -i'; echo rc2=$? >{d}/rc2; stty -a >{d}/after2"
    ));
    tmux.wait_for("again$");
    let pid = wait_file(&dir.path().join("pid"));
    let killed = Command::new("kill")
        .args(["-TERM", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(wait_file(&dir.path().join("rc2")), "rc2=143\n");
    let after2 = wait_file(&dir.path().join("after2"));
    assert_eq!(
        settings(&before),
        settings(&after2),
        "stty -a after a SIGTERM"
    );
    let destroyed = Command::new(BIN)
        .args(["sandbox", "destroy", "--adapter", "local", &sandbox])
        .status()
        .unwrap();
    assert!(destroyed.success());
}
