//! The reliability suite (`cargo test -p execseam-reliability`): every adapter in [`ADAPTERS`]
//! against every chaos action on every request of an exec, bare and layered. See
//! `docs/reliability.md`; to add an adapter, add a `setup` function and a table entry.

use std::sync::Arc;
use std::time::Duration;

use execseam_core::{BoxFuture, Error, ErrorKind, Exec, Sandbox, SandboxSpec};
use execseam_reliability::{Adapter, Expect, Knobs, Options, Setup, Through, orphans, run};

/// Every adapter the suite drives. Local has no network, so no proxy can stand in front of it.
const ADAPTERS: &[Adapter] = &[Adapter {
    name: "e2b",
    setup: e2b,
}];

fn internal(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, e.to_string())
}

fn e2b(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_e2b::{E2bConfig, E2bProvider};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::e2b::E2bEmulator;
    Box::pin(async move {
        let emulator = E2bEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let key = emulator.api_key().to_owned();
        let config = move |url: &str| {
            E2bConfig::new(key.clone())
                .api_url(url)
                .sandbox_url(url)
                .sandbox_timeout(Duration::from_secs(3600))
                .stream_idle_timeout(knobs.idle_timeout)
                .request_timeout(knobs.idle_timeout)
        };
        let upstream = emulator.base_url();
        let direct = E2bProvider::new(config(&upstream))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        let through: Through = Arc::new(move |url: String| {
            let (config, id) = (config(&url), id.clone());
            Box::pin(async move {
                let exec = E2bProvider::new(config)?.connect(&id).await?;
                Ok(Arc::new(exec) as Arc<dyn Exec>)
            })
        });
        Ok(Setup {
            upstream,
            scratch: "/home/user".into(),
            direct: Arc::new(direct),
            through,
            guard: Box::new(emulator),
        })
    })
}

fn options() -> Options {
    use Expect::*;
    Options {
        actions: vec![
            ("status:429", Invariants),
            ("status:429:86400", Invariants),
            ("status:503", Invariants),
            ("status-after:502", Invariants),
            ("reset", Invariants),
            ("reset-after", Invariants),
            ("hang", Invariants),
            ("stall", Invariants),
            ("trickle:100:1", Invariants),
            ("endless", Invariants),
            ("truncate:20", Invariants),
            ("drop-last", Invariants),
            ("garbage:4096", Invariants),
            ("delay:200", Correct),
            ("rechunk:1", Correct),
            ("rechunk:65536", Correct),
        ],
        deadline: Duration::from_millis(1500),
        idle_timeout: Duration::from_secs(3),
        bare_bound: Duration::from_secs(20),
        parallel: 12,
        rss_limit: 1 << 30,
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let options = options();
    let only = std::env::var("EXECSEAM_RELIABILITY_ONLY").ok();
    let adapters: Vec<Adapter> = ADAPTERS
        .iter()
        .filter(|a| only.as_deref().is_none_or(|o| o == a.name))
        .map(|a| Adapter {
            name: a.name,
            setup: a.setup,
        })
        .collect();
    let summary = runtime.block_on(run(&adapters, &options));
    let (orphan_cases, orphan_failures) = runtime.block_on(orphans(&adapters, &options));
    for f in summary
        .setup_failures
        .iter()
        .chain(&summary.failures)
        .chain(&orphan_failures)
    {
        println!("FAIL {f}");
    }
    println!("{}", summary.line(&options));
    println!(
        "orphans: {orphan_cases} cases ({} adapters x {{sandbox destroyed, emulator stopped}}): {} passed, {} failed",
        adapters.len(),
        orphan_cases - orphan_failures.len(),
        orphan_failures.len()
    );
    let over = summary.peak_rss > options.rss_limit;
    if over {
        println!("FAIL the peak RSS is over the limit");
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    if over
        || !summary.failures.is_empty()
        || !summary.setup_failures.is_empty()
        || !orphan_failures.is_empty()
    {
        std::process::exit(1);
    }
}
