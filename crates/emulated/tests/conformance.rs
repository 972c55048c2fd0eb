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
//! With `EXECSEAM_LIVE=1` the one adapter named runs against the real provider, configured from
//! this process's environment (see `docs/adapters/<adapter>.md`): the sandbox `EXECSEAM_SANDBOX`
//! names, else a new one.

use std::sync::Arc;

use execseam::{Error, Provider, SandboxSpec};
use execseam_conformance::Target;
use execseam_emulated::{Emulated, Spec, targets};

const TARGET: &str = "EXECSEAM_CONFORMANCE_TARGET";
const ADAPTER: &str = "EXECSEAM_CONFORMANCE_ADAPTER";

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

/// Runs `spec` in this process.
fn run(spec: Spec) {
    execseam_conformance::main(move || async move {
        Emulated::start(spec, Default::default())
            .await?
            .conformance()
            .await
    });
}

/// Runs every target in a child process of its own (the same binary with [`TARGET`] set).
fn each_in_a_child(chosen: &[Spec]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listing = args.iter().any(|a| a == "--list");
    let mut failed = Vec::new();
    for spec in chosen {
        if !listing {
            println!("=== {} ===", spec.name);
        }
        let status = std::process::Command::new(&exe)
            .args(&args)
            .env(TARGET, spec.name)
            .status()
            .expect("running the conformance binary");
        if !status.success() {
            failed.push(spec.name);
        }
        if listing {
            break;
        }
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
        Ok(target)
    });
}
