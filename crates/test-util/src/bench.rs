//! What the adapters' per-crate benches share: the run's scale (`EXECSEAM_BENCH_SCALE`), the
//! runtime, medians, and the two ways they take turns so that no side always runs on a warmer
//! machine: two sides alternating pair by pair ([`alternate`]), and the adapter against the
//! provider's Python and TypeScript SDKs in rotating rounds ([`Sdks::compare`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use execseam_core::{Command, Exec};

use crate::interop;

/// `EXECSEAM_BENCH_SCALE` (1.0 when unset or not a number): how much of its default count a
/// bench runs.
pub fn scale() -> f64 {
    std::env::var("EXECSEAM_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// `base` scaled by [`scale`], at least `min`.
pub fn count(base: usize, min: usize) -> usize {
    ((base as f64 * scale()) as usize).max(min)
}

/// A multi-thread runtime with every driver; `workers` threads, or tokio's default when `None`.
pub fn runtime(workers: Option<usize>) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    builder.enable_all().build().expect("runtime")
}

/// Whether the bench runs under `cargo bench` (`--bench` among the arguments); `cargo test
/// --benches` runs it without, and then it prints how to run it (`name`, `package`) and does
/// nothing.
pub fn under_cargo_bench(name: &str, package: &str) -> bool {
    let yes = std::env::args().any(|a| a == "--bench");
    if !yes {
        println!("{name}: run with `cargo bench -p {package}`");
    }
    yes
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Prints one line: `name`, the medians `(a, b)` in milliseconds under their `labels`, their
/// ratio a/b and the count `n` of each; returns the ratio.
pub fn report(name: &str, labels: [&str; 2], (a, b): (Duration, Duration), n: usize) -> f64 {
    let ratio = a.as_secs_f64() / b.as_secs_f64();
    let [la, lb] = labels;
    println!(
        "{name:<34} {la} {:>8.3} ms   {lb} {:>8.3} ms   ratio {ratio:.3}  ({n} each, medians)",
        ms(a),
        ms(b),
    );
    ratio
}

/// Runs `a` and `b` `iterations` times each, in pairs whose order swaps every pair (`a` first
/// in the first), and returns the median time of each: `(a, b)`.
pub async fn alternate<A, B, T, U>(iterations: usize, mut a: A, mut b: B) -> (Duration, Duration)
where
    A: AsyncFnMut() -> T,
    B: AsyncFnMut() -> U,
{
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for i in 0..iterations {
        for a_now in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if a_now {
                a().await;
                ta.push(t.elapsed());
            } else {
                b().await;
                tb.push(t.elapsed());
            }
        }
    }
    (median(ta), median(tb))
}

/// The provider's official SDKs as a bench runs them: `bench.py` in the Python environment
/// and `bench.mjs` in the npm directory, both in `crates/emulator-<name>/interop`, with the
/// emulator's environment and `BENCH_N`; each prints its own timings ([`interop::timings`]).
pub struct Sdks {
    /// The folder of `bench.py` and `bench.mjs`.
    pub dir: PathBuf,
    /// The Python interpreter of the SDK's virtualenv.
    pub python: PathBuf,
    /// The npm directory of the TypeScript SDK.
    pub npm: PathBuf,
    /// The scripts' environment.
    pub env: Vec<(String, String)>,
    /// The execs each client times in a round: `base` scaled ([`count`], at least 5).
    pub n: usize,
}

impl Sdks {
    /// `emulator-<name>`'s SDKs: the virtualenv `name` from its `requirements.txt` and the npm
    /// directory `<name>-npm`, run with `env` (the emulator's) and `BENCH_N` execs.
    pub fn install(name: &str, mut env: Vec<(String, String)>, base: usize) -> Sdks {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../emulator-{name}/interop"));
        let python = interop::python_env(name, &dir.join("requirements.txt")).expect("python SDK");
        let npm = interop::node_env(&format!("{name}-npm"), &dir).expect("TS SDK");
        let n = count(base, 5);
        env.push(("BENCH_N".into(), n.to_string()));
        Sdks {
            dir,
            python,
            npm,
            env,
            n,
        }
    }

    /// Three rounds of the adapter (`adapter`: its timings of [`Sdks::n`] execs), the Python SDK
    /// and the TypeScript SDK, each round in a rotated order so that no client always runs on
    /// a warmer machine; prints the medians of each under `labels` (adapter, Python,
    /// TypeScript) and the adapter's ratios to the SDKs, after `what`.
    pub async fn compare(
        &self,
        what: &str,
        labels: [&str; 3],
        mut adapter: impl AsyncFnMut() -> Vec<Duration>,
    ) {
        let (mut seam, mut py, mut ts) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..3 {
            let (p, e) = (self.python.clone(), self.env.clone());
            let script = self.dir.join("bench.py");
            let sdk_py = move || interop::timings(&interop::run_python(&p, &script, &e).unwrap());
            let (m, e) = (self.npm.clone(), self.env.clone());
            let script = self.dir.join("bench.mjs");
            let sdk_ts = move || interop::timings(&interop::run_node(&m, &script, &e).unwrap());
            for step in 0..3 {
                match (round + step) % 3 {
                    0 => seam.extend(adapter().await),
                    1 => py.extend(blocking(sdk_py.clone()).await),
                    _ => ts.extend(blocking(sdk_ts.clone()).await),
                }
            }
        }
        let (a, p, t) = (ms(median(seam)), ms(median(py)), ms(median(ts)));
        let [la, lp, lt] = labels;
        println!(
            "{what} (median of {} each): {la} {a:.2} ms, {lp} {p:.2} ms, {lt} {t:.2} ms; adapter/python {:.2}, adapter/js {:.2}",
            3 * self.n,
            a / p,
            a / t
        );
    }
}

impl Sdks {
    /// [`Sdks::compare`] on `exec` running `true` (once before, to warm up), as `what`.
    pub async fn compare_true<E: Exec + ?Sized>(&self, exec: &E, what: &str, labels: [&str; 3]) {
        let exec_true = async || {
            let out = exec.exec(Command::new(["true"]).unwrap()).await.unwrap();
            assert!(out.exit.success());
        };
        exec_true().await;
        self.compare(what, labels, async || times(self.n, exec_true).await)
            .await;
    }
}

/// `n` timings of `f`, one after the other.
pub async fn times<T>(n: usize, mut f: impl AsyncFnMut() -> T) -> Vec<Duration> {
    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        f().await;
        v.push(t.elapsed());
    }
    v
}

async fn blocking(
    f: impl FnOnce() -> std::io::Result<Vec<Duration>> + Send + 'static,
) -> Vec<Duration> {
    tokio::task::spawn_blocking(f).await.unwrap().unwrap()
}
