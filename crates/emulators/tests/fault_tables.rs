//! Every emulator's fault table, one test per emulator of [`execseam_emulators::ALL`]:
//!
//! - every rule the table declares is accepted when the emulator starts (all at once, firing on
//!   every request: `ROUTE=FAULT@always`), and a route of the table really consults the fault
//!   handle (its name is passed to the handle in the emulator's source: `take("create")`,
//!   `fault("lookup")`, `admit(&s, "status", …)`, or a route name a function maps a request to);
//! - a rule outside the table is refused at start with a clear message: an unknown route (the
//!   message lists the routes) and, on each route that does not render every fault, a fault it
//!   does not render (the message lists what it renders).
//!
//! The `exec` route's faults are injected for real by the conformance suite's fault cases
//! against every emulated adapter (`docs/conformance/<adapter>.txt`).

use std::path::PathBuf;

use execseam_emulators::{EmulatorOptions, Entry, FaultRule};
use libtest_mimic::{Arguments, Failed, Trial};

/// A rule for `fault` (a [`execseam_emulators::Fault::name`]) on `route`, firing always.
fn rule(route: &str, fault: &str) -> FaultRule {
    let fault = match fault {
        "latency" => "latency:1",
        "429" => "429:1",
        other => other,
    };
    format!("{route}={fault}@always")
        .parse()
        .unwrap_or_else(|e| panic!("{route}={fault}: {e}"))
}

fn options(rules: Vec<FaultRule>) -> EmulatorOptions {
    EmulatorOptions {
        faults: rules,
        ..EmulatorOptions::default()
    }
}

/// The emulator's source, every `.rs` file under `crates/emulator-<name>/src`.
fn source(name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(format!("emulator-{name}"))
        .join("src");
    let mut all = String::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                all.push_str(&std::fs::read_to_string(&p).expect("a source file"));
            }
        }
    }
    all
}

async fn check(entry: &'static Entry) -> Result<(), String> {
    let table = entry.faults;
    let name = entry.name;
    // Every declared rule is accepted.
    let all: Vec<FaultRule> = table
        .iter()
        .flat_map(|(route, faults)| faults.iter().map(|f| rule(route, f)))
        .collect();
    let n = all.len();
    let emu = (entry.start)(options(all))
        .await
        .map_err(|e| format!("{name} refused its own table's {n} rules: {e}"))?;
    drop(emu);
    // Each route is asked of the fault handle in the emulator's code.
    let src = source(name);
    for (route, _) in table {
        let literal = format!("\"{route}\"");
        if src.matches(&literal).count() < 2 {
            return Err(format!(
                "{name}: route {route:?} is in the fault table but nothing in the emulator's \
                 source names it beside the table: its rules would never fire"
            ));
        }
    }
    // An unknown route is refused, naming the routes.
    let e = (entry.start)(options(vec![rule("no-such-route", "500")]))
        .await
        .err()
        .ok_or_else(|| format!("{name} accepted a rule on an unknown route"))?;
    if e.kind() != std::io::ErrorKind::InvalidInput
        || !e
            .to_string()
            .contains(&format!("the {name} emulator has no fault route"))
    {
        return Err(format!("{name}: unclear refusal of an unknown route: {e}"));
    }
    // On each route that does not render everything, an unrendered fault is refused.
    for (route, faults) in table {
        let Some(missing) = execseam_emulators::kit::FAULT_NAMES
            .iter()
            .find(|f| !faults.contains(f))
        else {
            continue;
        };
        let e = (entry.start)(options(vec![rule(route, missing)]))
            .await
            .err()
            .ok_or_else(|| {
                format!("{name} accepted {route}={missing}, which it does not render")
            })?;
        if !e.to_string().contains("does not render") {
            return Err(format!("{name}: unclear refusal of {route}={missing}: {e}"));
        }
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let trials = execseam_emulators::ALL
        .iter()
        .map(|entry| {
            Trial::test(format!("fault_table::{}", entry.name), move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(check(entry))
                    .map_err(Failed::from)
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
