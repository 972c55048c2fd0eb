//! The conformance suite against every emulated adapter (one binary; the records in
//! `docs/conformance/<target>.txt`).
//!
//! `EXECSEAM_CONFORMANCE_TARGET` names one target and runs it in this process (what each child
//! below does); `EXECSEAM_CONFORMANCE_ADAPTER` names an adapter, whose targets run (Cloudflare
//! has two: its output modes). With neither, every emulated target runs, each in a child
//! process of its own, and the binary fails if one does. `cargo xtask conformance --adapter X`
//! sets the adapter. Arguments (a name filter, `--exact`) are passed to every target; `--list`
//! lists the cases once (every target has the same ones), so a runner that lists and then runs
//! each case by name (`cargo nextest run`) runs each on every target.
//!
//! `EXECSEAM_CONFORMANCE_JOBS` (default 5) children run at once: the targets are independent
//! (each its own emulator, ports and sandboxes; a sandbox's `/tmp` is its own), and one target's
//! cases mostly wait on its emulator's sandboxes, so a few at once use the cores the one-by-one
//! run leaves idle (the whole run used 0.5 of a core at 3 or 5 jobs on a loaded 2-core machine).
//! The slowest targets start first. With more than one job a child's output is kept and printed
//! whole, in the targets' order.
//!
//! Every target's run is also the secrets check (`secrets/mod.rs`): the emulator is started with a
//! planted API key, planted env values, stdin and file contents go through the adapter before the
//! suite, every crate traces at TRACE, and a planted secret in any captured line, error or result
//! fails the run.
//!
//! With `EXECSEAM_LIVE=1` the one adapter named runs against the real provider, configured from
//! this process's environment (see `docs/adapters/<adapter>.md`): the sandbox `EXECSEAM_SANDBOX`
//! names, else a new one.

mod secrets;

use std::sync::Arc;

use execseam::{Error, Provider, SandboxSpec};
use execseam_conformance::Target;
use execseam_emulated::{Emulated, Spec, targets};
use execseam_emulators::EmulatorOptions;

const TARGET: &str = "EXECSEAM_CONFORMANCE_TARGET";
const ADAPTER: &str = "EXECSEAM_CONFORMANCE_ADAPTER";
const JOBS: &str = "EXECSEAM_CONFORMANCE_JOBS";

/// The targets that take longest, slowest first (each's wall time in the clean-clone CI run of
/// 57b9987: chrono 68 s, agentcore 43, cloudflare-exact 42, kubernetes-sandboxd 41, ax 40; the
/// others 22-37 s). They start first; the rest keep the targets' order.
const SLOWEST_FIRST: [&str; 5] = [
    "chrono",
    "agentcore",
    "cloudflare-exact",
    "kubernetes-sandboxd",
    "ax",
];

fn main() {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let chosen: Vec<Spec> = match (env(TARGET), env(ADAPTER)) {
        (Some(t), _) => {
            let spec = targets()
                .into_iter()
                .find(|s| s.name == t)
                .unwrap_or_else(|| panic!("{TARGET}={t:?} names no emulated target"));
            return run(spec);
        }
        (None, Some(a)) => targets().into_iter().filter(|s| s.adapter == a).collect(),
        (None, None) => targets(),
    };
    if chosen.is_empty() {
        panic!("{ADAPTER} names no emulated adapter");
    }
    if env("EXECSEAM_LIVE").as_deref() == Some("1") {
        return live(chosen[0]);
    }
    each_in_a_child(&chosen);
}

/// Runs `spec` in this process, under the secrets watch.
fn run(spec: Spec) {
    let watch = secrets::Watch::install(spec.adapter);
    let w = watch.clone();
    let args = execseam_conformance::libtest_mimic::Arguments::from_args();
    let summary = execseam_conformance::run_with_args(args, move || async move {
        let options = EmulatorOptions {
            token: Some(secrets::TOKEN.to_owned()),
            ..EmulatorOptions::default()
        };
        let emulated = Emulated::start(spec, options).await?;
        w.arm(&emulated);
        secrets::planted(&w, &emulated).await?;
        emulated.conformance().await
    });
    let mut code = summary.code;
    if summary.set_up {
        match watch.check(spec.name) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("{e}");
                code = 1;
            }
        }
    }
    std::process::exit(code);
}

/// Runs every target in a child process of its own (the same binary with [`TARGET`] set),
/// [`JOBS`] at once.
fn each_in_a_child(chosen: &[Spec]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let child = |spec: &Spec| {
        let mut c = std::process::Command::new(&exe);
        c.args(&args).env(TARGET, spec.name);
        c
    };
    if args.iter().any(|a| a == "--list") {
        let status = child(&chosen[0])
            .status()
            .expect("running the conformance binary");
        std::process::exit(status.code().unwrap_or(1));
    }
    let jobs = std::env::var(JOBS)
        .ok()
        .map(|j| {
            j.parse::<usize>()
                .expect("EXECSEAM_CONFORMANCE_JOBS: a number")
        })
        .unwrap_or(5)
        .clamp(1, chosen.len());
    let mut failed = Vec::new();
    if jobs == 1 {
        for spec in chosen {
            println!("=== {} ===", spec.name);
            let status = child(spec)
                .status()
                .expect("running the conformance binary");
            if !status.success() {
                failed.push(spec.name);
            }
        }
    } else {
        // The slowest start first, so that the last ones to finish are short.
        let mut order: Vec<usize> = (0..chosen.len()).collect();
        order.sort_by_key(|&i| {
            SLOWEST_FIRST
                .iter()
                .position(|n| *n == chosen[i].name)
                .unwrap_or(SLOWEST_FIRST.len())
        });
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            for _ in 0..jobs {
                let tx = tx.clone();
                let (next, child, order) = (&next, &child, &order);
                scope.spawn(move || {
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&i) = order.get(n) else { break };
                        let spec = &chosen[i];
                        let out = child(spec)
                            .output()
                            .expect("running the conformance binary");
                        let _ = tx.send((i, out));
                    }
                });
            }
            drop(tx);
            // Printed in the targets' order, each as soon as the ones before it are.
            let mut done: Vec<Option<std::process::Output>> = vec![None; chosen.len()];
            let mut printed = 0;
            for (i, out) in rx {
                done[i] = Some(out);
                while let Some(Some(out)) = done.get_mut(printed).map(Option::take) {
                    let spec = &chosen[printed];
                    println!("=== {} ===", spec.name);
                    print!("{}", String::from_utf8_lossy(&out.stdout));
                    eprint!("{}", String::from_utf8_lossy(&out.stderr));
                    if !out.status.success() {
                        failed.push(spec.name);
                    }
                    printed += 1;
                }
            }
        });
    }
    if !failed.is_empty() {
        eprintln!("conformance failed for: {}", failed.join(", "));
        std::process::exit(1);
    }
}

/// The adapter against the real provider, configured from the environment.
fn live(spec: Spec) {
    execseam_conformance::main(move || async move {
        let provider: Arc<dyn Provider> = Arc::from(execseam::provider(spec.adapter)?);
        let sandbox = match std::env::var("EXECSEAM_SANDBOX")
            .ok()
            .filter(|s| !s.is_empty())
        {
            Some(id) => provider.connect(&id).await?,
            None => provider.create(SandboxSpec::new()).await?,
        };
        let scratch = format!("/tmp/execseam-conformance-{}", std::process::id());
        let made = sandbox
            .exec(execseam::Command::new(["mkdir", "-p", "--", &scratch])?)
            .await?;
        if !made.exit.success() {
            return Err(Error::new(
                execseam::ErrorKind::Internal,
                format!("cannot make {scratch}: {made:?}"),
            ));
        }
        let sandbox: Arc<dyn execseam::Sandbox> = sandbox.into();
        let mut target = Target::new(spec.name, sandbox as Arc<dyn execseam::Exec>)
            .provider(provider)
            .scratch(scratch)
            .live(true)
            .proptest_cases(4);
        if let Some(id) = execseam_emulators::entry(spec.adapter).map(|e| e.missing_sandbox_id) {
            target = target.missing_sandbox_id(id);
        }
        if let Some(why) = spec.children_end {
            target = target.children_end_with_the_command(why);
        }
        if let Some(why) = spec.exit_waits {
            target = target.exit_waits_for_children(why);
        }
        if let Some(why) = spec.signals_unnamed {
            target = target.signal_deaths_unnamed(why);
        }
        Ok(target)
    });
}
