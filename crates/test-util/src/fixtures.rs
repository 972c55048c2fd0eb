//! The services tests need besides the emulators, started by the tests themselves: a container
//! engine for the docker adapter ([`podman`]) and PostgreSQL for the server's replicas
//! ([`postgres`]). `cargo test --workspace` on a fresh machine needs nothing started by hand.
//!
//! Each is the repository's own (`.ci/podman`, `.ci/postgres`: private storage and state, nothing
//! of the machine's touched), started once per test process on first use and shared by every
//! test of the process. A process that started one stops it when it exits, however it exits
//! (a holder process waits for the test process's end on a pipe); a process that found it already
//! running (another test binary still using it, or one started by hand) leaves it running. A
//! lock file counts the users: the stop waits until no other test process uses the service.
//!
//! A machine that names its own keeps it: with `DOCKER_HOST` and `EXECSEAM_DOCKER_IMAGE` set, the
//! engine is that one; with `EXECSEAM_TEST_POSTGRES_URL` set, the database is that one. A machine
//! where the service cannot be installed or started fails the test with one line saying what is
//! missing.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// A service's environment (`DOCKER_HOST`, `EXECSEAM_DOCKER_IMAGE`, …; or
/// `EXECSEAM_TEST_POSTGRES_URL`).
#[derive(Debug)]
pub struct Service {
    vars: BTreeMap<String, String>,
}

impl Service {
    /// One variable.
    pub fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// Every variable (to hand to a child process, or to a `from_vars`).
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// The container engine the docker adapter's tests use: the machine's own when `DOCKER_HOST` and
/// `EXECSEAM_DOCKER_IMAGE` are set, else the repository's podman (`.ci/podman start`). Its
/// variables: `DOCKER_HOST` (a `unix://` socket), `EXECSEAM_DOCKER_IMAGE`,
/// `EXECSEAM_DOCKER_RUNTIME`, `EXECSEAM_DOCKER_ULIMITS`, and `EXECSEAM_PODMAN_DIR` (the
/// repository's podman only).
///
/// # Panics
///
/// With one line saying what is missing, when the engine cannot be started.
pub fn podman() -> &'static Service {
    static PODMAN: OnceLock<Result<Service, String>> = OnceLock::new();
    let got = PODMAN.get_or_init(|| {
        let own: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, v)| {
                !v.is_empty()
                    && (k.starts_with("DOCKER_")
                        || k.starts_with("EXECSEAM_DOCKER_")
                        || k == "EXECSEAM_PODMAN_DIR")
            })
            .collect();
        if own.contains_key("DOCKER_HOST") && own.contains_key("EXECSEAM_DOCKER_IMAGE") {
            return Ok(Service { vars: own });
        }
        start(
            "podman",
            "the docker adapter's tests need a container engine (the repository's podman)",
        )
    });
    got.as_ref().unwrap_or_else(|e| panic!("{e}"))
}

/// The PostgreSQL the server's replica tests use: the machine's own when
/// `EXECSEAM_TEST_POSTGRES_URL` is set, else the repository's (`.ci/postgres start`). Its one
/// variable: `EXECSEAM_TEST_POSTGRES_URL` (an administrator's URL; tests create their databases).
///
/// # Panics
///
/// With one line saying what is missing, when the database cannot be started.
pub fn postgres() -> &'static Service {
    static POSTGRES: OnceLock<Result<Service, String>> = OnceLock::new();
    let got = POSTGRES.get_or_init(|| {
        if let Ok(url) = std::env::var("EXECSEAM_TEST_POSTGRES_URL")
            && !url.is_empty()
        {
            let vars = BTreeMap::from([("EXECSEAM_TEST_POSTGRES_URL".to_owned(), url)]);
            return Ok(Service { vars });
        }
        start(
            "postgres",
            "the server's replica tests need PostgreSQL (the repository's)",
        )
    });
    got.as_ref().unwrap_or_else(|e| panic!("{e}"))
}

/// The checkout (where `.ci/` and `target/` are).
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The pipes of the holders: closed (so the holders act) only when the test process ends.
static HOLDERS: Mutex<Vec<ChildStdin>> = Mutex::new(Vec::new());

/// Starts `.ci/<name>` (or joins the instance already running), reads `target/<name>/env`, and
/// arranges the stop at this process's end if it started it.
fn start(name: &str, need: &str) -> Result<Service, String> {
    let root = checkout();
    let script = root.join(".ci").join(name);
    let fail = |what: String| format!("{need}: {what}");
    std::fs::create_dir_all(root.join("target")).map_err(|e| fail(format!("target/: {e}")))?;
    let lock = root.join("target").join(format!("{name}.users"));
    // A holder takes a shared lock on the users' file and keeps it until this process ends;
    // then, if this process started the service, it waits until it is the last user and stops
    // it. It runs in a session of its own, so an interrupt of the test run does not end it first.
    const HOLDER: &str = r#"exec 9>"$0" && flock -s 9 && echo held || exit 1
read -r mode
while read -r _; do :; done
[ "$mode" = stop ] || exit 0
flock -x 9 && exec "$1" stop >/dev/null 2>&1"#;
    let mut holder = Command::new("setsid")
        .args(["sh", "-c", HOLDER])
        .arg(&lock)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| fail(format!("cannot run setsid/sh/flock (util-linux): {e}")))?;
    let mut line = String::new();
    let held = holder
        .stdout
        .take()
        .map(|o| BufReader::new(o).read_line(&mut line));
    if !matches!(held, Some(Ok(_))) || line.trim() != "held" {
        return Err(fail(format!("cannot lock {}", lock.display())));
    }
    let mut stdin = holder.stdin.take().expect("the holder's stdin");
    let out = Command::new(&script)
        .arg("start")
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(format!("cannot run {}: {e}", script.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(fail(format!(
            "`.ci/{name} start` failed ({}): {last}",
            out.status
        )));
    }
    let already = stderr.contains("already");
    use std::io::Write as _;
    writeln!(stdin, "{}", if already { "keep" } else { "stop" })
        .map_err(|e| fail(format!("the holder: {e}")))?;
    HOLDERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(stdin);
    let env = root.join("target").join(name).join("env");
    let text =
        std::fs::read_to_string(&env).map_err(|e| fail(format!("{}: {e}", env.display())))?;
    let vars = text
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("export ").split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect();
    Ok(Service { vars })
}
