//! A long-running `execseam` process (`emulate`, `chaos`) for the CLI's tests: started, read
//! until ready, its exports parsed, stopped with SIGTERM when dropped (or killed at once, to
//! cut every connection its clients hold).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `execseam` daemon.
pub struct Daemon {
    child: Child,
    /// What it printed on stdout before it was ready.
    pub banner: Vec<String>,
    /// Everything it writes to stderr.
    stderr: Output,
}

/// Starts `bin ARGS` with `env` added and stdin, stdout and stderr piped.
pub fn spawn_piped(bin: &str, args: &[&str], env: &[(String, String)]) -> Child {
    Command::new(bin)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a child wrote so far on one of its pipes ([`collect`]).
pub type Output = Arc<Mutex<Vec<u8>>>;

/// Reads `from` to its end on a thread of its own; what came so far is in the answer.
pub fn collect(mut from: impl Read + Send + 'static) -> Output {
    let seen = Output::default();
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    seen
}

/// [`collect`]'s bytes so far, as text.
pub fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.lock().unwrap()).into_owned()
}

impl Daemon {
    /// Starts `bin ARGS` and reads stdout until a line satisfies `ready`.
    pub fn start(bin: &str, args: &[&str], ready: impl Fn(&str) -> bool) -> Daemon {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = collect(child.stderr.take().unwrap());
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut banner = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "{bin} {args:?} exited early: {banner:?} {}",
                text(&stderr)
            );
            let line = line.trim_end().to_owned();
            let done = ready(&line);
            banner.push(line);
            if done {
                break;
            }
        }
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        Daemon {
            child,
            banner,
            stderr,
        }
    }

    /// `bin emulate PROVIDER`, ready once it printed `export READY_VAR=…`.
    pub fn emulate(bin: &str, provider: &str, ready_var: &str) -> Daemon {
        let ready = format!("export {ready_var}=");
        Daemon::start(bin, &["emulate", provider], |l| l.starts_with(&ready))
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The `export K=V` lines it printed.
    pub fn env(&self) -> Vec<(String, String)> {
        self.banner
            .iter()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
            .collect()
    }

    /// One exported variable.
    pub fn var(&self, k: &str) -> String {
        self.env()
            .into_iter()
            .find(|(n, _)| n == k)
            .unwrap_or_else(|| panic!("no {k} in {:?}", self.banner))
            .1
    }

    /// Waits (up to 10 s) until its stderr contains `text`; returns its stderr.
    pub fn wait_stderr(&self, text: &str) -> String {
        let t = Instant::now();
        loop {
            let s = self::text(&self.stderr);
            if s.contains(text) || t.elapsed() > Duration::from_secs(10) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its exit status, if it has ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// SIGKILL, now: every connection it holds drops without a goodbye.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}
