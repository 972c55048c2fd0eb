//! The reliability suite (`cargo test -p execseam-reliability`): every adapter in [`ADAPTERS`]
//! against every chaos action on every request of an exec, bare and layered. See
//! `docs/reliability.md`; to add an adapter, add a `setup` function and a table entry.

mod setups;

use std::time::Duration;

use execseam_reliability::{
    Adapter, Options, PROCESS_ROUTES, Phase, creates, orphans, processes, run, secrets, sizes,
};
use setups::ADAPTERS;

fn main() {
    // With RUST_BACKTRACE=1 (as CI sets it) every panic inside an emulator task or client
    // (several cases cut connections mid-frame) and every captured `std::backtrace` is resolved
    // against this debug binary's DWARF: gigabytes of resident memory that the peak-RSS check
    // would blame on the adapters (5.4 GiB in a clean-clone CI run against 362 MiB without).
    // The suite reports through its FAIL lines, not backtraces, so both are turned off before
    // any thread exists.
    // SAFETY: single-threaded here; nothing reads the environment concurrently.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("RUST_BACKTRACE", "0");
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let options = Options::from_env();
    let only = std::env::var("EXECSEAM_RELIABILITY_ONLY").ok();
    let adapters: Vec<Adapter> = ADAPTERS
        .iter()
        .filter(|a| only.as_deref().is_none_or(|o| o == a.name))
        .map(|a| Adapter {
            name: a.name,
            setup: a.setup,
            children_end: a.children_end,
            parallel: None,
            chunk_framed: a.chunk_framed,
            one_string: a.one_string,
        })
        .collect();
    // `EXECSEAM_RELIABILITY_PHASE=creates` (or `matrix`, `orphans`, …): that one only.
    let phase = std::env::var("EXECSEAM_RELIABILITY_PHASE").ok();
    let on = |name: &str| phase.as_deref().is_none_or(|p| p == name);
    let summary = if on("matrix") {
        runtime.block_on(run(&adapters, &options))
    } else {
        Default::default()
    };
    let mut phases = Vec::new();
    if on("creates") {
        phases.push(runtime.block_on(creates(&adapters, &options)));
    }
    if on("orphans") {
        phases.push(runtime.block_on(orphans(&adapters, &options)));
    }
    if on("sizes") {
        phases.push(runtime.block_on(sizes(&adapters, &options)));
    }
    // Issue 34: the process routes of one spooled adapter and Modal's native handles.
    if on("processes") {
        let routes: Vec<Adapter> = adapters
            .iter()
            .filter(|a| PROCESS_ROUTES.contains(&a.name))
            .copied()
            .collect();
        phases.push(runtime.block_on(processes(&routes, &options)));
    }
    // Last: the TRACE capture stays installed for the rest of the process.
    if on("secrets") {
        phases.push(runtime.block_on(secrets(&adapters, &options)));
    }
    for p in &phases {
        for n in p.not_applicable() {
            println!("{n}");
        }
    }
    for f in summary.setup_failures.iter().chain(&summary.failures) {
        println!("FAIL {f}");
    }
    for p in &phases {
        for f in p.failures() {
            println!("FAIL {f}");
        }
    }
    for l in summary.per_adapter_lines() {
        println!("{l}");
    }
    println!("{}", summary.line(&options));
    for p in &phases {
        println!("{}", p.line());
    }
    let over = summary.peak_rss > options.rss_limit;
    if over {
        println!("FAIL the peak RSS is over the limit");
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    if over
        || !summary.failures.is_empty()
        || !summary.setup_failures.is_empty()
        || !phases.iter().all(Phase::passed)
    {
        std::process::exit(1);
    }
}
