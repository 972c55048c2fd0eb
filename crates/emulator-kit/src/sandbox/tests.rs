//! The harness's own proofs. Each test makes its sandboxes under a state directory of its own and
//! counts only what it created (other people run emulators on the same machine).

use std::time::{Duration, Instant};

use execseam_core::{Command, Exec, Exit};

use super::*;

/// A state directory for one test, removed (if empty) at the end.
struct StateDir(PathBuf);

impl StateDir {
    fn new(name: &str) -> StateDir {
        let p = std::env::temp_dir().join(format!(
            "execseam-harness-test-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        StateDir(p)
    }

    /// [`new`](Self::new) where the host has namespaces; elsewhere `None`, having said why the
    /// test is skipped (`why` follows the reason).
    fn namespaced(name: &str, why: &str) -> Option<StateDir> {
        if namespaces() {
            return Some(StateDir::new(name));
        }
        eprintln!("SKIP-REASON: needs root (Isolation::Namespaces){why}");
        None
    }

    fn sandboxing(&self, isolation: Isolation) -> Sandboxing {
        Sandboxing {
            isolation,
            mounts: Vec::new(),
            state_dir: Some(self.0.clone()),
        }
    }

    fn entries(&self) -> usize {
        std::fs::read_dir(&self.0).unwrap().count()
    }
}

impl Drop for StateDir {
    /// Waits for the test's sandboxes to be torn down (on their own threads), then removes the
    /// directory, which must then be empty.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.entries() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = self.entries();
        let _ = std::fs::remove_dir(&self.0);
        if !std::thread::panicking() {
            assert_eq!(left, 0, "sandbox state left in {}", self.0.display());
        }
    }
}

fn spec() -> SandboxSpec {
    let user = User::new("emu", 1000, "/home/emu").groups(["users"]);
    SandboxSpec::new(
        "test",
        "emu-host",
        user,
        [("PATH", "/usr/local/bin:/usr/bin:/bin")],
    )
    .other_users([User::root()])
    .dirs([Dir::root("/workspace")])
}

fn namespaces() -> bool {
    Isolation::detect() == Isolation::Namespaces
}

async fn run(s: &Sandbox, script: &str) -> execseam_core::Output {
    s.exec()
        .exec(Command::new(["sh", "-c", script]).unwrap())
        .await
        .unwrap()
}

/// [`run`] as root.
async fn run_as_root(s: &Sandbox, script: &str) -> execseam_core::Output {
    s.exec_as(&User::root())
        .exec(Command::new(["sh", "-c", script]).unwrap())
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits until the sandbox's teardown finished and its state directory is gone.
async fn gone(state: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while state.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!state.exists(), "{} left behind", state.display());
}

fn alive(host_pid: u32) -> bool {
    // A zombie is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{host_pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test]
async fn files_and_commands_see_the_same_paths_and_sandboxes_are_private() {
    let dir = StateDir::new("paths");
    let iso = Isolation::detect();
    let a = Sandbox::create("a", spec(), &dir.sandboxing(iso)).unwrap();
    let b = Sandbox::create("b", spec(), &dir.sandboxing(iso)).unwrap();
    a.fs(|fs| std::fs::write(fs.path("/home/emu/f.txt"), "from files api"))
        .await
        .unwrap();
    let home = a.visible_path("/home/emu");
    let cmd = Command::builder(["sh", "-c", "cat \"$HOME/f.txt\"; printf x > /tmp/t; pwd"])
        .workdir(&home)
        .build()
        .unwrap();
    let out = a.exec().exec(cmd).await.unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("from files api{home}\n"),
        "{out:?}"
    );
    let t = a.fs(|fs| std::fs::read(fs.path("/tmp/t"))).await.unwrap();
    assert_eq!(t, b"x");
    assert!(
        !b.fs(|fs| Ok(fs.path("/tmp/t").exists())).await.unwrap(),
        "sandbox b must not see a's /tmp"
    );
    let out = run(&b, "cat /tmp/t").await;
    assert_eq!(out.exit, Exit::Code(1));
    let (sa, sb) = (a.state_dir().to_path_buf(), b.state_dir().to_path_buf());
    a.destroy();
    b.destroy();
    gone(&sa).await;
    gone(&sb).await;
    assert_eq!(dir.entries(), 0);
}

#[tokio::test]
async fn a_missing_workdir_inside_the_sandbox_is_not_found() {
    let dir = StateDir::new("workdir");
    let s = Sandbox::create("c", spec(), &dir.sandboxing(Isolation::detect())).unwrap();
    let cmd = Command::builder(["true"])
        .workdir(s.visible_path("/home/emu/nope"))
        .build()
        .unwrap();
    let err = s.exec().exec(cmd).await.unwrap_err();
    assert_eq!(err.kind(), execseam_core::ErrorKind::NotFound);
    let out = s
        .exec()
        .exec(Command::new(["no-such-program-execseam"]).unwrap())
        .await
        .unwrap();
    assert_eq!(out.exit, Exit::Code(127), "{out:?}");
}

#[tokio::test]
async fn ps_lists_only_the_sandbox_and_ids_are_the_providers() {
    let Some(dir) = StateDir::namespaced("ps", "; degraded mode has no pid isolation") else {
        return;
    };
    let a = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let b = Sandbox::create("b", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    // A daemon in b must not show in a.
    run(&b, "sleep 30 >/dev/null 2>&1 &").await;
    let out = run(&a, "ps -e -o pid=,comm=,args=").await;
    let lines: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    // pid 1 has a short, neutral name, as a real sandbox's init (E2B's is `/sbin/init`), and
    // nothing else of the harness runs: no lifeline reader, no script in an argv.
    assert_eq!(lines[0], "1 init /sbin/init", "{lines:?}");
    for l in &lines[1..] {
        let comm = l.split(' ').nth(1).unwrap_or("");
        assert!(
            ["sh", "ps"].contains(&comm) && !l.contains("execseam"),
            "a process that is not the sandbox's: {l} in {lines:?}"
        );
    }
    assert!(lines.len() <= 3, "{lines:?}");
    let out = run(
        &a,
        "id -u; id -un; id -g; id -Gn; echo $HOME; hostname; uname -n; cat /etc/hostname",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "1000\nemu\n1000\nemu users\n/home/emu\nemu-host\nemu-host\nemu-host\n",
        "{out:?}"
    );
    let out = run_as_root(
        &a,
        "id -u; echo $HOME; stat -c %U:%a /home/emu /root /tmp /workspace",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "0\n/root\nemu:755\nroot:700\nroot:1777\nroot:755\n",
        "{out:?}"
    );
    // The host's processes are not even addressable.
    let out = run(&a, &format!("kill -0 {}", std::process::id())).await;
    assert_ne!(out.exit, Exit::Code(0));
}

#[tokio::test]
async fn writes_stay_in_the_sandbox_and_the_host_is_hidden() {
    let Some(dir) = StateDir::namespaced("fs", "; degraded mode shares the host filesystem") else {
        return;
    };
    let a = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let b = Sandbox::create("b", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let nanos = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .unwrap()
        .as_nanos();
    let marker = format!("execseam-harness-{}-{nanos}", std::process::id());
    let out = run_as_root(&a, &format!("echo x > /var/tmp/{marker} && echo y > /etc/{marker} && echo z > /usr/local/{marker} && cat /var/tmp/{marker} /etc/{marker}")).await;
    assert_eq!(text(&out.stdout), "x\ny\n", "{out:?}");
    for p in ["/var/tmp", "/etc", "/usr/local"] {
        assert!(
            !Path::new(&format!("{p}/{marker}")).exists(),
            "{p}/{marker} reached the host"
        );
    }
    let out = run(&b, &format!("cat /var/tmp/{marker}")).await;
    assert_ne!(out.exit, Exit::Code(0), "b sees a's /var/tmp");
    // The checkout (this test's working directory) and the host's homes are not visible.
    let cwd = std::env::current_dir().unwrap();
    let out = run(
        &a,
        &format!("ls -A {} /root /home /tmp 2>&1; ls -A / ", cwd.display()),
    )
    .await;
    let listing = text(&out.stdout);
    assert!(
        listing.contains("No such file or directory") || listing.contains("cannot access"),
        "the checkout is visible: {listing}"
    );
    assert!(!listing.contains("Cargo.toml"), "{listing}");
    // Unprivileged: the host's root-owned files cannot be written even below the overlay.
    let out = run(&a, "echo no >> /etc/passwd").await;
    assert_ne!(out.exit, Exit::Code(0), "{out:?}");
    // Root inside cannot mount or make devices (its bounding set lacks the capabilities).
    let out = run_as_root(
        &a,
        "mount -t tmpfs t /mnt || mknod /tmp/vda b 254 0 || echo denied",
    )
    .await;
    assert!(text(&out.stdout).ends_with("denied\n"), "{out:?}");
}

#[tokio::test]
async fn the_files_api_resolves_symlinks_inside_the_sandbox() {
    let Some(dir) = StateDir::namespaced("symlink", "") else {
        return;
    };
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let host_target = dir.0.join("host-victim");
    run(
        &s,
        &format!("ln -s {} /home/emu/link", host_target.display()),
    )
    .await;
    s.fs(|fs| std::fs::write(fs.path("/home/emu/link"), "through the link"))
        .await
        .unwrap_err(); // the target's directory does not exist inside the sandbox
    assert!(!host_target.exists(), "the files API wrote a host file");
    let host_etc = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    run(&s, "ln -s /etc/hostname /home/emu/h").await;
    let read = s
        .fs(|fs| std::fs::read_to_string(fs.path("/home/emu/h")))
        .await
        .unwrap();
    assert_eq!(read, "emu-host\n");
    assert_ne!(read, host_etc);
}

/// The init reads its lifeline itself: no process of the sandbox is the harness's, so a wait
/// for "only the init is left" ends (a Fly restart used to wait out its whole grace period, and
/// `kill_processes` spun its 200 rounds), and signals from inside do not end the init.
#[tokio::test]
async fn the_init_is_the_only_process_of_an_idle_sandbox() {
    let Some(dir) = StateDir::namespaced("lifeline", "") else {
        return;
    };
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let ns = s.ns().unwrap();
    let live = || -> Vec<u32> {
        ns.processes(usize::MAX)
            .into_iter()
            .filter(|p| !is_zombie(*p))
            .collect()
    };
    // The init's start-up commands (mount, ip) are gone once `create` returned.
    let until = Instant::now() + Duration::from_secs(10);
    while live() != [ns.init as u32] {
        assert!(Instant::now() < until, "more than the init: {:?}", live());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    run(&s, "setsid sh -c 'sleep 60' >/dev/null 2>&1 < /dev/null &").await;
    let listed = |s: &Sandbox| -> Vec<u32> { s.process_table().iter().map(|p| p.0).collect() };
    let until = Instant::now() + Duration::from_secs(10);
    while listed(&s).len() < 2 {
        assert!(
            Instant::now() < until,
            "the daemon never showed: {:?}",
            listed(&s)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Signals from inside: pid 1 ignores them; the daemon goes.
    run(&s, "kill -TERM 1; kill -INT 1; kill -HUP 1; true").await;
    s.signal_processes(libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(10);
    while listed(&s) != [1] {
        assert!(
            Instant::now() < until,
            "left after SIGTERM: {:?}",
            listed(&s)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.kill_processes();
    assert_eq!(listed(&s), [1]);
    assert_eq!(live(), [ns.init as u32], "the init survived");
}

/// Without network: loopback only (a socket to elsewhere is refused at once), and the host's
/// network is untouched; the sandbox is still a sandbox of the host's other namespaces.
#[tokio::test]
async fn a_sandbox_without_network_has_loopback_only() {
    let Some(dir) = StateDir::namespaced("nonet", "") else {
        return;
    };
    let s = Sandbox::create(
        "a",
        spec().without_network(),
        &dir.sandboxing(Isolation::Namespaces),
    )
    .unwrap();
    let out = run(
        &s,
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; ip -o route",
    )
    .await;
    assert_eq!(text(&out.stdout), "lo\n", "{out:?}");
    let with = Sandbox::create("b", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let out = run(&with, "cat /proc/net/dev | tail -n +3 | wc -l").await;
    assert_ne!(text(&out.stdout).trim(), "1", "the host's network: {out:?}");
    // Degraded isolation cannot honour it: refused, typed.
    let e = Sandbox::create(
        "c",
        spec().without_network(),
        &dir.sandboxing(Isolation::Translate),
    )
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
}

#[tokio::test]
async fn destroy_kills_daemons_and_a_dropped_exec_kills_its_group() {
    let Some(dir) = StateDir::namespaced("kill", "") else {
        return;
    };
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    // A command that outlives its deadline: the exec future is dropped, its group is killed.
    let slow = Command::new(["sh", "-c", "sleep 30 & sleep 30; wait"]).unwrap();
    let r = tokio::time::timeout(Duration::from_millis(300), s.exec().exec(slow)).await;
    assert!(r.is_err());
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left: Vec<u32> = s
            .processes()
            .unwrap()
            .into_iter()
            .filter(|p| {
                alive(*p)
                    && std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "sleep")
            })
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after the deadline: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A daemon (its own session, reparented to the init) dies with the sandbox.
    run(&s, "setsid sh -c 'sleep 60' >/dev/null 2>&1 < /dev/null &").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let procs = s.processes().unwrap();
    assert!(procs.len() >= 2, "init and the daemon: {procs:?}");
    let state = s.state_dir().to_path_buf();
    s.destroy();
    gone(&state).await;
    // The kernel tears a pid namespace down asynchronously: allow it a bounded moment under load.
    let until = Instant::now() + Duration::from_secs(5);
    for p in procs {
        while alive(p) {
            assert!(Instant::now() < until, "process {p} survived destroy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn spawn_reports_the_pid_the_sandbox_sees() {
    let Some(dir) = StateDir::namespaced("spawn", "") else {
        return;
    };
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", "echo $$; ps -o pgid= -p $$"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdout(std::process::Stdio::piped());
    let child = s.spawn(cmd, s.user(), "/workspace").await.unwrap();
    assert_ne!(child.pid, child.host_pid);
    let out = child.child.wait_with_output().await.unwrap();
    let lines: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .collect();
    assert_eq!(
        lines,
        [child.pid.to_string(), child.pid.to_string()],
        "its own group, inside"
    );
}

#[tokio::test]
async fn mounts_bind_host_paths_on_purpose() {
    let Some(dir) = StateDir::namespaced("mount", "") else {
        return;
    };
    let host = tempdir_in(&dir.0, "host");
    std::fs::write(host.join("README"), "repo\n").unwrap();
    let mut sandboxing = dir.sandboxing(Isolation::Namespaces);
    sandboxing.mounts = vec![
        format!("{}:/home/emu/repo", host.display())
            .parse()
            .unwrap(),
        format!("{}:/srv/ro:ro", host.display()).parse().unwrap(),
    ];
    let s = Sandbox::create("a", spec(), &sandboxing).unwrap();
    let out = run_as_root(&s, "cat /home/emu/repo/README /srv/ro/README; echo w > /home/emu/repo/new; echo w > /srv/ro/other || echo ro").await;
    assert_eq!(text(&out.stdout), "repo\nrepo\nro\n", "{out:?}");
    assert!(host.join("new").exists());
    assert!(!host.join("other").exists());
    let state = s.state_dir().to_path_buf();
    drop(s);
    gone(&state).await;
    std::fs::remove_dir_all(&host).unwrap();
    assert_eq!(dir.entries(), 0);
}

fn tempdir_in(base: &Path, name: &str) -> PathBuf {
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[tokio::test]
async fn the_degraded_mode_translates_paths() {
    let dir = StateDir::new("translate");
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Translate)).unwrap();
    let home = s.visible_path("/home/emu");
    assert!(
        home.starts_with(&*s.state_dir().to_string_lossy()),
        "{home}"
    );
    let out = run(&s, "echo $HOME").await;
    assert_eq!(text(&out.stdout), format!("{home}\n"));
    s.fs(|fs| std::fs::write(fs.path("/tmp/x"), "1"))
        .await
        .unwrap();
    assert!(s.state_dir().join("tmp/x").exists());
    assert!(s.processes().is_none());
    let state = s.state_dir().to_path_buf();
    drop(s);
    assert!(!state.exists());
}

#[tokio::test]
async fn the_files_api_as_a_user_has_that_users_permissions_and_ownership() {
    let Some(dir) = StateDir::namespaced("fsas", "") else {
        return;
    };
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let user = s.user().clone();
    let owner = s
        .fs_as(&user, |fs| {
            use std::os::unix::fs::MetadataExt;
            std::fs::write(fs.path("/home/emu/mine"), "x")?;
            let m = std::fs::metadata(fs.path("/home/emu/mine"))?;
            Ok((m.uid(), m.gid()))
        })
        .await
        .unwrap();
    assert_eq!(owner, (1000, 1000));
    let denied = s
        .fs_as(&user, |fs| std::fs::write(fs.path("/etc/hostname"), "nope"))
        .await
        .unwrap_err();
    assert_eq!(denied.kind(), io::ErrorKind::PermissionDenied);
    // As root (a daemon that runs as root) the same write works, inside the sandbox only.
    s.fs(|fs| std::fs::write(fs.path("/etc/hostname"), "changed\n"))
        .await
        .unwrap();
    let out = run(&s, "cat /etc/hostname").await;
    assert_eq!(text(&out.stdout), "changed\n");
    assert_ne!(
        std::fs::read_to_string("/etc/hostname").unwrap(),
        "changed\n"
    );
    // The emulator process itself kept its credentials (only the thread changed).
    assert_eq!(crate::sys::euid(), 0);
    let me = std::fs::read_to_string("/proc/self/status").unwrap();
    assert!(
        me.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().skip(1).all(|u| u == "0")),
        "{me}"
    );
}

/// Emulator code reaches sandbox files only through `Sandbox::fs`/`fs_as` (paths and symlinks
/// resolved inside the sandbox); `host_path` (through `/proc/<init>/root`, where an absolute
/// symlink resolves on the host) is for tests.
#[test]
fn emulator_code_does_not_use_host_paths() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    let mut stack = vec![src];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            if p.ends_with("harness/sandbox/mod.rs") {
                continue; // defines it
            }
            let text = std::fs::read_to_string(&p).unwrap();
            // Allowed only inside an emulator's own `pub fn host_path` test accessor.
            let mut in_accessor = false;
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("pub fn host_path") {
                    in_accessor = true;
                } else if in_accessor && line == "    }" {
                    in_accessor = false;
                }
                if line.contains(".host_path(") && !in_accessor {
                    bad.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Reads the terminal's output until it contains `needle` (or the terminal closes, or 20 s
/// pass: generous, the machine is shared); returns everything read.
async fn read_until(master: &PtyMaster, acc: &mut String, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while !acc.contains(needle) {
        let n = tokio::time::timeout_at(deadline, master.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} in the terminal's output: {acc:?}"))
            .unwrap();
        if n == 0 {
            break;
        }
        acc.push_str(&text(&buf[..n]));
    }
}

fn pty_command(script: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", script])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "xterm");
    cmd
}

#[tokio::test]
async fn a_pty_process_has_a_real_terminal_of_the_sandbox() {
    let Some(dir) = StateDir::namespaced("pty", "") else {
        return;
    };
    let s = Sandbox::create("a", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let script = r#"
        test -t 0 && test -t 1 && test -t 2 && echo T012=yes
        echo "SIZE=$(stty size)"
        echo "WHO=$(id -u):$(hostname):$(tty):$$:$(pwd):$(stat -c %U $(tty))"
        echo "PTS=$(ls /dev/pts | tr '\n' ,)"
        echo "SESSION=$(ps -o sid= -p $$ | tr -d ' ')"
        echo READY
        read line
        echo "SIZE2=$(stty size) LINE=$line"
        exit 7
    "#;
    let mut p = s
        .spawn_pty(
            pty_command(script),
            s.user(),
            "/workspace",
            PtySize::new(24, 80),
        )
        .await
        .unwrap();
    assert_ne!(p.pid, p.host_pid);
    let mut out = String::new();
    read_until(&p.master, &mut out, "READY").await;
    assert!(out.contains("T012=yes"), "{out:?}");
    assert!(out.contains("SIZE=24 80"), "{out:?}");
    // The sandbox's user, host name, its own devpts instance (pty 0 is the first and only
    // terminal there), the sandbox's pid, the workdir; the slave is the user's.
    let who = format!("WHO=1000:emu-host:/dev/pts/0:{}:/workspace:emu", p.pid);
    assert!(out.contains(&who), "{who:?} not in {out:?}");
    assert!(out.contains("PTS=0,ptmx,"), "{out:?}");
    assert!(out.contains(&format!("SESSION={}", p.pid)), "{out:?}");
    assert!(out.contains("\r\n"), "the line discipline's ONLCR: {out:?}");
    p.master.resize(PtySize::new(40, 100)).unwrap();
    assert_eq!(p.master.size().unwrap(), PtySize::new(40, 100));
    p.master.write_all(b"hello\n").await.unwrap();
    read_until(&p.master, &mut out, "LINE=hello").await;
    assert!(out.contains("SIZE2=40 100 LINE=hello"), "{out:?}");
    let status = tokio::time::timeout(Duration::from_secs(20), p.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    // Every holder of the slave is gone: the terminal reads as closed.
    read_until(&p.master, &mut out, "\u{0}never").await;

    // ^C typed into the terminal reaches its foreground group (the shell and its sleep).
    let mut p = s
        .spawn_pty(
            pty_command("echo GO; sleep 300"),
            s.user(),
            "/workspace",
            PtySize::new(24, 80),
        )
        .await
        .unwrap();
    let mut out = String::new();
    read_until(&p.master, &mut out, "GO").await;
    // Typed again every 200 ms: under load the first ^C can land while the shell is still
    // setting up (dash then discards it); the test fails if none ever interrupts.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        p.master.write_all(b"\x03").await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), p.child.wait()).await {
            Ok(st) => break st.unwrap(),
            Err(_) if Instant::now() < deadline => continue,
            Err(_) => panic!("^C never interrupted the terminal's foreground group"),
        }
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");

    // Killing the process group ends the process and its background child, and closes the
    // terminal.
    let mut p = s
        .spawn_pty(
            pty_command("sleep 300 & echo BG=$!; wait"),
            s.user(),
            "/workspace",
            PtySize::new(24, 80),
        )
        .await
        .unwrap();
    let mut out = String::new();
    read_until(&p.master, &mut out, "BG=").await;
    s.signal_group(p.host_pid, libc::SIGKILL).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), p.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    read_until(&p.master, &mut out, "\u{0}never").await;
    assert!(!out.contains('\u{0}'));
    let bg: u32 = out
        .split("BG=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no BG pid in {out:?}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.host_pid(bg).is_some_and(alive) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !s.host_pid(bg).is_some_and(alive),
        "the background sleep survived"
    );
    let state = s.state_dir().to_path_buf();
    drop(s);
    gone(&state).await;
}

/// Reads a file through the files API (as the emulators do), `None` if it does not exist.
async fn read(s: &Sandbox, path: &'static str) -> Option<String> {
    s.fs(move |fs| std::fs::read_to_string(fs.path(path)))
        .await
        .ok()
}

#[tokio::test]
async fn pause_freezes_every_process_and_resume_continues_them() {
    let Some(dir) = StateDir::namespaced("pause", ": pause freezes the sandbox's cgroup") else {
        return;
    };
    let s = Sandbox::create("p1", spec(), &dir.sandboxing(Isolation::Namespaces)).unwrap();
    let out = run(
        &s,
        // Written aside and renamed: a read never meets the file truncated and empty.
        "(i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.02; done) >/dev/null 2>&1 & echo $!",
    )
    .await;
    let pid = text(&out.stdout).trim().to_owned();
    tokio::time::sleep(Duration::from_millis(200)).await;
    if describe_pause().contains("cgroup") {
        let host = s.host_pid(pid.parse().unwrap()).unwrap();
        let cg = std::fs::read_to_string(format!("/proc/{host}/cgroup")).unwrap();
        assert!(
            cg.contains("/execseam-"),
            "the loop is not in the sandbox's cgroup: {cg}"
        );
    }
    s.pause().unwrap();
    assert!(s.is_paused());
    s.pause().unwrap(); // idempotent
    let frozen = read(&s, "/tmp/count").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read(&s, "/tmp/count").await.unwrap(),
        frozen,
        "the loop ran while paused"
    );
    // A command while paused is refused at once, never a hang.
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        s.exec().exec(Command::new(["true"]).unwrap()),
    )
    .await
    .expect("an exec on a paused sandbox answered");
    assert!(r.is_err(), "an exec on a paused sandbox gave {r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    s.resume().unwrap();
    s.resume().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after: u64 = read(&s, "/tmp/count")
        .await
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        after > frozen.trim().parse::<u64>().unwrap(),
        "the loop did not continue"
    );
    // The same process: memory and processes were kept.
    let out = run(&s, &format!("kill -0 {pid} && echo alive")).await;
    assert_eq!(text(&out.stdout), "alive\n");
    // Destroying a paused sandbox needs no resume.
    s.pause().unwrap();
    let state = s.state_dir().to_path_buf();
    s.destroy();
    gone(&state).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_is_one_point_in_time_and_sandboxes_from_it_are_independent() {
    let Some(dir) = StateDir::namespaced("snapshot", ": snapshots copy the overlay's upper layer")
    else {
        return;
    };
    let sb = dir.sandboxing(Isolation::Namespaces);
    let src = Sandbox::create("src", spec(), &sb).unwrap();
    let out = run(
        &src,
        "echo a > /home/emu/f && mkfifo /tmp/fifo && ln -s f /home/emu/link",
    )
    .await;
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    let out = run_as_root(
        &src,
        "mkdir -p /workspace/d && echo deep > /workspace/d/g && rm /etc/debian_version",
    )
    .await;
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    let snap = tokio::task::block_in_place(|| src.snapshot()).unwrap();
    assert!(snap.size_bytes() > 0);
    run(&src, "echo b > /home/emu/f").await;

    let fork = Sandbox::create_from("fork", spec(), &sb, &snap).unwrap();
    let out = run(
        &fork,
        "cat /home/emu/f /workspace/d/g /home/emu/link; test -p /tmp/fifo && echo fifo; test -e /etc/debian_version || echo deleted; id -un; stat -c %U /home/emu/f; hostname",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "a\ndeep\na\nfifo\ndeleted\nemu\nemu\nemu-host\n",
        "{}",
        text(&out.stderr)
    );
    // Independent: writes on either side stay there.
    run(&fork, "echo c > /home/emu/f").await;
    assert_eq!(read(&src, "/home/emu/f").await.unwrap(), "b\n");
    assert_eq!(read(&fork, "/home/emu/f").await.unwrap(), "c\n");
    // The checkout stays hidden in a sandbox made from a snapshot.
    let cwd = std::env::current_dir().unwrap();
    let out = run(
        &fork,
        &format!("test -e '{}' && echo visible", cwd.display()),
    )
    .await;
    assert_eq!(text(&out.stdout), "");

    // Restored in place, the source is the snapshot's again, whole: changed, new and deleted
    // files outside the home too; its processes end, its files API and commands go on.
    let out = run_as_root(
        &src,
        "echo new > /var/tmp/new && rm /workspace/d/g && touch /etc/debian_version",
    )
    .await;
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    let bg = run(&src, "sleep 300 >/dev/null 2>&1 </dev/null & echo $!").await;
    let bg = src
        .host_pid(text(&bg.stdout).trim().parse().unwrap())
        .unwrap();
    tokio::task::block_in_place(|| src.restore(&snap)).unwrap();
    assert!(!alive(bg), "a process outlived the restore");
    let out = run(
        &src,
        "cat /home/emu/f /workspace/d/g; test -e /var/tmp/new || echo gone; test -e /etc/debian_version || echo deleted; hostname",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "a\ndeep\ngone\ndeleted\nemu-host\n",
        "{}",
        text(&out.stderr)
    );
    assert_eq!(read(&src, "/home/emu/f").await.unwrap(), "a\n");
    assert_eq!(read(&fork, "/home/emu/f").await.unwrap(), "c\n");

    // A snapshot of the fork, and a sandbox from it; the first snapshot is not needed for it.
    let snap2 = tokio::task::block_in_place(|| fork.snapshot()).unwrap();
    drop(snap);
    let grand = Sandbox::create_from("grand", spec(), &sb, &snap2).unwrap();
    let out = run(&grand, "cat /home/emu/f /workspace/d/g").await;
    assert_eq!(text(&out.stdout), "c\ndeep\n");
    for s in [&src, &fork, &grand] {
        s.destroy();
    }
    drop(snap2);
    // StateDir's drop checks that the snapshots' copies were removed with them.
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_image_is_a_copy_mounted_over_a_path_and_unmounted_again() {
    let Some(dir) =
        StateDir::namespaced("dir-image", ": mounts need the sandbox's mount namespace")
    else {
        return;
    };
    let sb = dir.sandboxing(Isolation::Namespaces);
    let [src, other] = ["src", "other"].map(|id| Sandbox::create(id, spec(), &sb).unwrap());
    let tree = "mkdir -p /home/emu/p/sub && echo a > /home/emu/p/sub/f && chmod 640 /home/emu/p/sub/f && ln -s sub/f /home/emu/p/link && ln -s /etc/passwd /home/emu/p/abs";
    assert_eq!(run(&src, tree).await.exit, Exit::Code(0));
    let image = src.snapshot_dir("/home/emu/p").await.unwrap();
    assert_eq!(image.size_bytes(), 2);
    assert!(!src.is_paused(), "the source runs on after the copy");
    run(&src, "echo b > /home/emu/p/sub/f").await;
    let missing = src.snapshot_dir("/home/emu/nope").await.unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    let not_dir = src.snapshot_dir("/home/emu/p/sub/f").await.unwrap_err();
    assert_eq!(not_dir.kind(), io::ErrorKind::NotADirectory);

    run(&other, "mkdir /home/emu/q && echo under > /home/emu/q/old").await;
    other.mount_dir("/home/emu/q", Some(&image)).await.unwrap();
    let script = "cat /home/emu/q/sub/f /home/emu/q/link; readlink /home/emu/q/abs; stat -c '%U %a' /home/emu/q/sub/f; test -e /home/emu/q/old || echo hidden";
    let out = run(&other, script).await;
    let seen = (text(&out.stdout), text(&out.stderr));
    assert_eq!(seen.0, "a\na\n/etc/passwd\nemu 640\nhidden\n", "{}", seen.1);
    // Independent: the mount's writes reach neither the source nor the image.
    run(&other, "echo c > /home/emu/q/sub/f").await;
    assert_eq!(read(&src, "/home/emu/p/sub/f").await.unwrap(), "b\n");
    other.mount_dir("/srv/again", Some(&image)).await.unwrap();
    assert_eq!(read(&other, "/srv/again/sub/f").await.unwrap(), "a\n");
    // Unmounted, what was beneath shows again; an empty image mounts an empty directory.
    other.unmount_dir("/home/emu/q").await.unwrap();
    assert_eq!(read(&other, "/home/emu/q/old").await.unwrap(), "under\n");
    assert!(other.unmount_dir("/home/emu/q").await.is_err());
    other.mount_dir("/home/emu/q", None).await.unwrap();
    let out = run(&other, "ls -A /home/emu/q | wc -l").await;
    assert_eq!(text(&out.stdout).trim(), "0");
    assert!(other.mount_dir("/", None).await.is_err());
    for s in [&src, &other] {
        s.destroy();
    }
    drop(image);
    // StateDir's drop checks that the image's copy was removed with it.
}

#[tokio::test]
async fn ports_reach_only_the_sandbox_that_listens_and_not_while_paused() {
    let Some(dir) = StateDir::namespaced(
        "ports",
        ": ownership of a listener is told by pid namespace",
    ) else {
        return;
    };
    let sb = dir.sandboxing(Isolation::Namespaces);
    let a = Sandbox::create("a", spec(), &sb).unwrap();
    let b = Sandbox::create("b", spec(), &sb).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    run(&a, "echo served > /home/emu/index.txt").await;
    run(
        &a,
        &format!(
            "cd /home/emu && python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"
        ),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !crate::ports::listens(&a, port) {
        assert!(Instant::now() < deadline, "the server never listened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let get = || {
        http::Request::get("/index.txt")
            .header("host", format!("{port}-a.test.localhost"))
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let resp = crate::ports::forward(&a, port, get()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"served\n");
    assert!(!crate::ports::listens(&b, port));
    assert!(matches!(
        crate::ports::forward(&b, port, get()).await,
        Err(crate::ports::PortError::NotListening)
    ));
    a.pause().unwrap();
    let started = Instant::now();
    assert!(matches!(
        crate::ports::forward(&a, port, get()).await,
        Err(crate::ports::PortError::Paused)
    ));
    assert!(started.elapsed() < Duration::from_secs(1));
    a.destroy();
    b.destroy();
}
