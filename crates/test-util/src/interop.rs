//! Support for interop tests: the providers' official Python SDKs, installed into a virtualenv
//! under the target directory, run against an emulator.
//!
//! A test fails loudly when the registry cannot be reached: an interop check that silently skips
//! proves nothing.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

/// The workspace's target directory (`CARGO_TARGET_DIR`, or `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .nth(2)
                .map(|p| p.join("target"))
                .unwrap_or_else(|| PathBuf::from("target"))
        })
}

/// Ensures `target/interop/<name>/venv` exists with exactly `requirements` installed (pinned
/// versions) and returns its `python`. Re-creates the venv when the requirements change.
///
/// Tests of one binary run in parallel and may ask for the same virtualenv at once: creation of
/// one is serialised (cargo runs test binaries one after the other); two different ones (the
/// Cloudflare interop binary's `cloudflare` and `cloudflare-schema`) are made at the same time.
pub fn python_env(name: &str, requirements: &Path) -> io::Result<PathBuf> {
    type Locks = std::collections::HashMap<String, std::sync::Arc<Mutex<()>>>;
    static CREATING: Mutex<Option<Locks>> = Mutex::new(None);
    let this = CREATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get_or_insert_with(Locks::new)
        .entry(name.to_owned())
        .or_default()
        .clone();
    let _one_at_a_time = this.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = target_dir().join("interop").join(name);
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    let wanted = std::fs::read_to_string(requirements)?;
    let stamp = dir.join("installed-requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::create_dir_all(&dir)?;
    let host_python = std::env::var("EXECSEAM_PYTHON").unwrap_or_else(|_| "python3".into());
    check(
        Command::new(&host_python)
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv),
        "creating the virtualenv",
    )?;
    check(
        pip_install(&host_python, &python)?.arg(requirements),
        "installing the official SDK from the registry (is PyPI reachable?)",
    )?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}

/// `pip install --no-compile -r` into the virtualenv of `python`, which was made without pip: the
/// host's pip installs into it (`--python`, pip 22.3 and later), else pip is bootstrapped into it
/// first (`ensurepip`). The two skipped steps, a pip of its own in every virtualenv and
/// byte-compiling every installed module (Python compiles what a script imports when it imports
/// it), took about 35 s and 40 s of the 218 s the Daytona SDK's virtualenv took at load 11 on 2
/// cores (2026-12-06; 137 s without them).
fn pip_install(host_python: &str, python: &Path) -> io::Result<Command> {
    let host_pip = Command::new(host_python)
        .args(["-m", "pip", "--python"])
        .arg(python)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    let mut cmd = if host_pip {
        let mut c = Command::new(host_python);
        c.args(["-m", "pip", "--python"]).arg(python);
        c
    } else {
        check(
            Command::new(python).args(["-m", "ensurepip", "--default-pip"]),
            "bootstrapping pip into the virtualenv",
        )?;
        let mut c = Command::new(python);
        c.args(["-m", "pip"]);
        c
    };
    cmd.args([
        "install",
        "--no-compile",
        "--disable-pip-version-check",
        "--quiet",
        "-r",
    ]);
    Ok(cmd)
}

fn check(cmd: &mut Command, what: &str) -> io::Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Runs `script` with `python` and `env`; returns its output (the caller asserts on it). The
/// script can `from checks import ok, check` (`interop/checks.py`: the lines [`assert_checks`]
/// reads).
pub fn run_python(python: &Path, script: &Path, env: &[(String, String)]) -> io::Result<Output> {
    Command::new(python)
        .arg(script)
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("interop"),
        )
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .output()
}

/// The pinned TypeScript runtime the Chrono emulator's tests use: `tsx` (esbuild under Node.js,
/// which runs TypeScript on the Node.js 20 here; Node's own `--experimental-strip-types` needs
/// 22.6 or later).
pub const TSX_VERSION: &str = "4.20.6";

/// Ensures `target/interop/typescript` holds `tsx@`[`TSX_VERSION`] from the npm registry and
/// returns the argv prefix that runs a `.ts` file with it (`node …/tsx/dist/cli.mjs`). Fails
/// loudly when npm or the registry is unreachable.
pub fn typescript_runtime() -> io::Result<Vec<String>> {
    static CREATING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = hold(&CREATING);
    let dir = target_dir().join("interop").join("typescript");
    let cli = dir.join("node_modules/tsx/dist/cli.mjs");
    let stamp = dir.join("installed-tsx.txt");
    if !(cli.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(TSX_VERSION)) {
        // Install next to it, then move into place: another test process may be reading it.
        let tmp = dir.with_file_name(format!("typescript.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        std::fs::write(tmp.join("package.json"), "{\"private\": true}\n")?;
        check(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    "--prefix",
                ])
                .arg(&tmp)
                .arg(format!("tsx@{TSX_VERSION}")),
            "installing tsx from the npm registry (is it reachable?)",
        )?;
        std::fs::write(tmp.join("installed-tsx.txt"), TSX_VERSION)?;
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::rename(&tmp, &dir) {
            let _ = std::fs::remove_dir_all(&tmp);
            if !cli.exists() {
                return Err(e);
            }
        }
    }
    let node = std::env::var("EXECSEAM_NODE").unwrap_or_else(|_| "node".into());
    let node = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {node}"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| io::Error::other("node is not on PATH"))?;
    Ok(vec![node, cli.to_string_lossy().into_owned()])
}

/// Ensures `target/interop/<name>/node_modules` holds exactly what `<dir>/package-lock.json`
/// pins (`npm ci --ignore-scripts`, so nothing from the registry runs at install time) and
/// returns the npm directory. Re-installs when the lockfile changes. Needs `node` and `npm`.
pub fn node_env(name: &str, dir: &Path) -> io::Result<PathBuf> {
    static CREATING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = hold(&CREATING);
    let npm_dir = target_dir().join("interop").join(name);
    let lock = std::fs::read_to_string(dir.join("package-lock.json"))?;
    let manifest = std::fs::read_to_string(dir.join("package.json"))?;
    let stamp = npm_dir.join("installed-package-lock.json");
    if npm_dir.join("node_modules").is_dir()
        && std::fs::read_to_string(&stamp).ok().as_deref() == Some(lock.as_str())
    {
        return Ok(npm_dir);
    }
    let _ = std::fs::remove_dir_all(npm_dir.join("node_modules"));
    std::fs::create_dir_all(&npm_dir)?;
    std::fs::write(npm_dir.join("package.json"), manifest)?;
    std::fs::write(npm_dir.join("package-lock.json"), &lock)?;
    check(
        Command::new("npm")
            .args([
                "ci",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(&npm_dir),
        "installing the official npm client from the registry (is the npm registry reachable? are node and npm installed?)",
    )?;
    std::fs::write(&stamp, lock)?;
    Ok(npm_dir)
}

/// Runs `script` with `node`, resolving packages from `npm_dir`, with `env`.
pub fn run_node(npm_dir: &Path, script: &Path, env: &[(String, String)]) -> io::Result<Output> {
    // ESM resolves bare imports from the importing file's directory upwards: run a copy of the
    // script from inside the npm directory.
    let copy = npm_dir.join(script.file_name().unwrap_or_else(|| "check.mjs".as_ref()));
    std::fs::copy(script, &copy)?;
    Command::new("node")
        .arg(&copy)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(npm_dir)
        .stdin(Stdio::null())
        .output()
}

/// The per-call durations a benchmark script printed, one number of milliseconds per line.
pub fn timings(out: &Output) -> io::Result<Vec<std::time::Duration>> {
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "the benchmark script failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            l.trim()
                .parse::<f64>()
                .map(|ms| std::time::Duration::from_secs_f64(ms / 1000.0))
                .map_err(|_| io::Error::other(format!("not a number of ms: {l:?}")))
        })
        .collect()
}

/// Asserts that a client check script succeeded, printed `OK` last, and ran exactly `want`
/// checks (lines starting `ok `): a check that silently stopped running fails the test.
pub fn assert_checks(name: &str, out: &Output, want: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "the {name} check failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let checks = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(
        checks, want,
        "every check of the {name} script ran:\n{stdout}"
    );
}

/// Runs the Python client check `<dir>/<script>` with `env` against an emulator: the virtualenv
/// `name` from `<dir>/requirements.txt` ([`python_env`]) and the script ([`run_python`]) off the
/// async runtime; then asserts that it ran exactly `want` checks ([`assert_checks`]).
pub async fn python_checks(
    name: &'static str,
    dir: &Path,
    script: &str,
    env: Vec<(String, String)>,
    want: usize,
) {
    let (reqs, script) = (dir.join("requirements.txt"), dir.join(script));
    checks_off_runtime(script.display().to_string(), want, move || {
        let python = python_env(name, &reqs)
            .unwrap_or_else(|e| panic!("the {name} virtualenv (is PyPI reachable?): {e}"));
        run_python(&python, &script, &env).expect("python runs")
    })
    .await;
}

/// [`python_checks`] for a JavaScript client check: the npm directory `name` from
/// `<dir>/package-lock.json` ([`node_env`]) and the script ([`run_node`]).
pub async fn node_checks(
    name: &'static str,
    dir: &Path,
    script: &str,
    env: Vec<(String, String)>,
    want: usize,
) {
    let (dir, script) = (dir.to_owned(), dir.join(script));
    checks_off_runtime(script.display().to_string(), want, move || {
        let npm = node_env(name, &dir).unwrap_or_else(|e| {
            panic!("the {name} npm directory (is the registry reachable?): {e}")
        });
        run_node(&npm, &script, &env).expect("node runs")
    })
    .await;
}

async fn checks_off_runtime(
    label: String,
    want: usize,
    run: impl FnOnce() -> Output + Send + 'static,
) {
    let out = tokio::task::spawn_blocking(run)
        .await
        .expect("the blocking task");
    assert_checks(&label, &out, want);
}

/// Arms `rules` (`(route, nth, fault)`) on `faults` once a client script creates
/// `<scratch>/faults-ready`, then creates `<scratch>/faults-armed`, which the script waits for.
/// Returns the two paths as the `FAULTS_READY` / `FAULTS_ARMED` environment.
pub fn arm_faults_when_ready(
    faults: &execseam_emulator_kit::FaultHandle,
    scratch: &Path,
    rules: Vec<(&'static str, u64, execseam_emulator_kit::Fault)>,
) -> Vec<(String, String)> {
    let ready = scratch.join("faults-ready");
    let armed = scratch.join("faults-armed");
    let faults = faults.clone();
    let (r, a) = (ready.clone(), armed.clone());
    std::thread::spawn(move || {
        while !r.exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for (route, n, fault) in rules {
            faults.add(execseam_emulator_kit::FaultRule {
                route: route.into(),
                when: execseam_emulator_kit::When::Nth(n),
                fault,
            });
        }
        let _ = std::fs::write(&a, b"");
    });
    vec![
        ("FAULTS_READY".into(), ready.to_string_lossy().into_owned()),
        ("FAULTS_ARMED".into(), armed.to_string_lossy().into_owned()),
    ]
}

/// Holds `lock` (one that a panicking holder poisoned too): one creation at a time.
fn hold(lock: &'static Mutex<()>) -> MutexGuard<'static, ()> {
    lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
