//! What `cargo xtask bench` needs besides its build, prepared WHILE the build runs: the build is
//! CPU-bound on these 2 cores, and most of this waits on a registry, apt or the disk. Before,
//! the suite did it serially on the clock of its rows (the Python SDKs' virtualenvs, the 1M-file
//! tree), and the services had to be started by hand.
//!
//! - the official Python SDKs of P2, each in `target/interop/<name>/venv` exactly as the interop
//!   tests make them (`execseam_test_util::interop::python_env`: the same venv, pip arguments and
//!   stamp file, so neither redoes the other's install);
//! - P4's tree: `dirs` × `files` empty files under `target/bench-tree-<dirs>x<files>`, made once;
//!   its stamp `.complete` holds the file count, which the suite reads (`EXECSEAM_BENCH_TREE`);
//! - the container engine of the docker rows and the PostgreSQL of the serve rows (`.ci/podman
//!   start`, `.ci/postgres start`, unless `DOCKER_HOST` / `EXECSEAM_TEST_POSTGRES_URL` are set or
//!   a previous start is still up; what this run started it stops at the end), and hyperfine for
//!   P3 (`apt-get`, as root, when it is not on PATH).
//!
//! A step that fails is reported and the run goes on: the suite then prints that row as "not
//! measured" with its own reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::root;

/// The virtualenvs of P2: every provider in the suite's `sdk_for` (a test keeps them equal).
pub const VENVS: &[&str] = &[
    "e2b",
    "daytona",
    "sprites",
    "agentcore",
    "modal",
    "vercel",
    "northflank",
    "kubernetes",
];

/// What the preparation left for the suite's binaries.
#[derive(Default)]
pub struct Prepared {
    /// Variables for the suite and the load bench (the services' env files, the tree).
    pub env: Vec<(String, String)>,
    /// One line per step: what it did and how long it took.
    pub log: Vec<String>,
    /// The `.ci` scripts whose service this run started (stopped by [`Prepared::stop`]).
    started: Vec<&'static str>,
}

impl Prepared {
    /// Stops the services this run started.
    pub fn stop(&mut self) {
        for script in self.started.drain(..).rev() {
            let _ = Command::new(root().join(script))
                .arg("stop")
                .current_dir(root())
                .stdout(Stdio::null())
                .status();
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs every step, the independent ones at once; returns when all have ended.
pub fn prepare(tree: (usize, usize)) -> Prepared {
    let root = root();
    let mut out = Prepared::default();
    std::thread::scope(|s| {
        let venvs: Vec<_> = VENVS
            .iter()
            .map(|name| {
                let root = &root;
                s.spawn(move || timed(&format!("venv {name}"), || venv(root, name)))
            })
            .collect();
        let dims = tree;
        let top = &root;
        let tree = s.spawn(move || timed("tree", || make_tree(top, dims.0, dims.1)));
        // apt-get holds one lock: hyperfine, podman and PostgreSQL one after the other.
        let (services, started, env) = {
            let mut log = Vec::new();
            let mut started = Vec::new();
            let mut env = Vec::new();
            log.push(timed("hyperfine", hyperfine));
            for (script, file, set) in [
                (".ci/podman", "target/podman/env", "DOCKER_HOST"),
                (
                    ".ci/postgres",
                    "target/postgres/env",
                    "EXECSEAM_TEST_POSTGRES_URL",
                ),
            ] {
                if std::env::var_os(set).is_some() {
                    log.push(format!("{script}: {set} is set, using it"));
                    continue;
                }
                let was_up = root.join(file).exists();
                let line = timed(script, || {
                    run_quiet(Command::new(root.join(script)).arg("start"))
                });
                if !was_up && !line.contains("failed") {
                    started.push(script);
                }
                log.push(line);
                match std::fs::read_to_string(root.join(file)) {
                    Ok(text) => env.extend(env_file(&text)),
                    Err(e) => log.push(format!("{file}: {e}")),
                }
            }
            (log, started, env)
        };
        out.log.extend(services);
        out.started = started;
        out.env = env;
        for v in venvs {
            out.log
                .push(v.join().unwrap_or_else(|_| "a venv step panicked".into()));
        }
        match tree.join() {
            Ok(line) => {
                if !line.contains("failed") {
                    let dir = root.join(tree_name(dims));
                    out.env
                        .push(("EXECSEAM_BENCH_TREE".into(), dir.display().to_string()));
                }
                out.log.push(line);
            }
            Err(_) => out.log.push("the tree step panicked".into()),
        }
    });
    out
}

/// `what: <result> (N s)`, or `what: failed: <why> (N s)`.
fn timed(what: &str, step: impl FnOnce() -> Result<String, String>) -> String {
    let t = Instant::now();
    let r = step();
    let secs = t.elapsed().as_secs_f64();
    match r {
        Ok(done) => format!("{what}: {done} ({secs:.1} s)"),
        Err(why) => format!("{what}: failed: {why} ({secs:.1} s)"),
    }
}

fn run_quiet(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok("done".into())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `KEY=VALUE` and `export KEY=VALUE` lines of a `.ci` env file (values unquoted).
pub fn env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.strip_prefix("export ").unwrap_or(l).split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_owned(), v.to_owned()))
        })
        .collect()
}

fn hyperfine() -> Result<String, String> {
    let on_path = |p: &str| {
        Command::new(p)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if on_path("hyperfine") {
        return Ok("on PATH".into());
    }
    let mut apt = Command::new("apt-get");
    apt.args([
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        "hyperfine",
    ])
    .env("DEBIAN_FRONTEND", "noninteractive");
    if run_quiet(&mut apt).is_err() {
        run_quiet(Command::new("apt-get").args(["update", "-qq"]))?;
        run_quiet(&mut apt)?;
    }
    Ok("installed with apt-get".into())
}

/// As `execseam_test_util::interop::python_env`: `target/interop/<name>/venv` with exactly the
/// pinned requirements, stamped with their text; kept when the stamp matches.
fn venv(root: &Path, name: &str) -> Result<String, String> {
    let requirements = root.join(format!("crates/emulator-{name}/interop/requirements.txt"));
    let wanted = std::fs::read_to_string(&requirements)
        .map_err(|e| format!("{}: {e}", requirements.display()))?;
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("interop")
        .join(name);
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let stamp = dir.join("installed-requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Ok("up to date".into());
    }
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let host = std::env::var("EXECSEAM_PYTHON").unwrap_or_else(|_| "python3".into());
    run_quiet(
        Command::new(&host)
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv),
    )?;
    // The host's pip installs into the virtualenv (`--python`), else pip is bootstrapped into it.
    let host_pip = run_quiet(
        Command::new(&host)
            .args(["-m", "pip", "--python"])
            .arg(&python)
            .arg("--version"),
    )
    .is_ok();
    let mut pip = if host_pip {
        let mut c = Command::new(&host);
        c.args(["-m", "pip", "--python"]).arg(&python);
        c
    } else {
        run_quiet(Command::new(&python).args(["-m", "ensurepip", "--default-pip"]))?;
        let mut c = Command::new(&python);
        c.args(["-m", "pip"]);
        c
    };
    run_quiet(
        pip.args([
            "install",
            "--no-compile",
            "--disable-pip-version-check",
            "--quiet",
            "-r",
        ])
        .arg(&requirements),
    )?;
    std::fs::write(&stamp, wanted).map_err(|e| e.to_string())?;
    Ok("installed".into())
}

fn tree_name((dirs, files): (usize, usize)) -> String {
    format!("target/bench-tree-{dirs}x{files}")
}

/// P4's tree: `dirs` directories of `files` empty files each; the stamp holds the count.
fn make_tree(root: &Path, dirs: usize, files: usize) -> Result<String, String> {
    let top = root.join(tree_name((dirs, files)));
    let stamp = top.join(".complete");
    let count = dirs * files;
    let dims = format!("{dirs}x{files}");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == count.to_string()) {
        return Ok(format!("{dims} up to date"));
    }
    let _ = std::fs::remove_dir_all(&top);
    for d in 0..dirs {
        let dir = top.join(format!("pkg-{d:04}/src"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        for i in 0..files {
            let name = format!("file_{:06x}_{i}.rs", (d * 7919 + i * 104_729) & 0xff_ffff);
            std::fs::File::create(dir.join(name)).map_err(|e| e.to_string())?;
        }
    }
    std::fs::write(&stamp, format!("{count}\n")).map_err(|e| e.to_string())?;
    Ok(format!("{dims} made, {count} files"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_parse() {
        let text = "export DOCKER_HOST=unix:///tmp/x/podman.sock\n# c\n\nEXECSEAM_TEST_POSTGRES_URL=postgres://e@127.0.0.1:5/e\nexport A=\"b c\"\n";
        assert_eq!(
            env_file(text),
            [
                ("DOCKER_HOST", "unix:///tmp/x/podman.sock"),
                ("EXECSEAM_TEST_POSTGRES_URL", "postgres://e@127.0.0.1:5/e"),
                ("A", "b c"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn the_tree_is_made_once_and_stamped_with_its_count() {
        let dir = std::env::temp_dir().join(format!("xtask-tree-{}", std::process::id()));
        let made = make_tree(&dir, 3, 4).expect("tree");
        assert_eq!(made, "3x4 made, 12 files");
        let top = dir.join(tree_name((3, 4)));
        assert_eq!(
            std::fs::read_to_string(top.join(".complete")).unwrap(),
            "12\n"
        );
        let files: usize = (0..3)
            .map(|d| {
                std::fs::read_dir(top.join(format!("pkg-{d:04}/src")))
                    .unwrap()
                    .count()
            })
            .sum();
        assert_eq!(files, 12);
        assert_eq!(make_tree(&dir, 3, 4).expect("again"), "3x4 up to date");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The venvs made here are the suite's (`sdk_for`), and made as the interop tests make them.
    #[test]
    fn venvs_match_the_suite_and_the_interop_helper() {
        let suite = std::fs::read_to_string(root().join("crates/reliability/benches/suite.rs"))
            .expect("suite.rs");
        let sdk_for = &suite[suite.find("fn sdk_for(").expect("sdk_for")..];
        let sdk_for = &sdk_for[..sdk_for.find("\n}\n").expect("end of sdk_for")];
        for name in VENVS {
            assert!(
                sdk_for.contains(&format!("\"{name}\" => (\n            \"{name}\",")),
                "sdk_for has no venv {name:?}"
            );
            assert!(
                root()
                    .join(format!("crates/emulator-{name}/interop/requirements.txt"))
                    .exists()
            );
        }
        assert_eq!(
            sdk_for.matches(" => (").count(),
            VENVS.len(),
            "sdk_for's providers"
        );
        let helper = std::fs::read_to_string(root().join("crates/test-util/src/interop.rs"))
            .expect("interop.rs");
        for same in [
            "join(\"interop\").join(name)",
            "dir.join(\"venv\")",
            "dir.join(\"installed-requirements.txt\")",
            "\"--disable-pip-version-check\",",
            "EXECSEAM_PYTHON",
        ] {
            assert!(helper.contains(same), "interop.rs no longer has {same}");
        }
    }
}
