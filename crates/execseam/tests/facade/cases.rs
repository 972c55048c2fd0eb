//! The cases of `tests/facade.rs` (compiled only with the `local` and `e2b` features).

use std::collections::BTreeMap;

use execseam::{ErrorKind, Provider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::e2b::E2bEmulator;

#[path = "../../examples/any_adapter.rs"]
mod example;

#[tokio::test(flavor = "multi_thread")]
async fn the_example_runs_against_local() {
    let root = std::env::temp_dir().join(format!("execseam-facade-{}", std::process::id()));
    let root_s = root.to_string_lossy().into_owned();
    example::run("local", &|k: &str| {
        (k == "EXECSEAM_LOCAL_SANDBOX_ROOT").then(|| root_s.clone())
    })
    .await
    .unwrap();
    // Closed means removed: nothing is left under the root.
    let left = std::fs::read_dir(&root).map_or(0, |d| d.count());
    assert_eq!(left, 0);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_runs_against_the_e2b_emulator() {
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let count = emu.sandbox_counter();
    let vars: BTreeMap<String, String> = [
        ("E2B_API_KEY", emu.api_key().to_owned()),
        ("E2B_API_URL", emu.base_url()),
        ("E2B_SANDBOX_URL", emu.base_url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    example::run("e2b", &|k: &str| vars.get(k).cloned())
        .await
        .unwrap();
    assert_eq!(count(), 0, "the example closed the sandbox it created");
    // provider_from takes the same map.
    let p = execseam::provider_from("e2b", &vars).unwrap();
    assert_eq!(p.provider(), "e2b");
}

#[test]
fn the_registry_names_what_is_compiled_in_and_what_is_not() {
    let names: Vec<_> = execseam::adapters().iter().map(|a| a.name).collect();
    assert_eq!(names[0], "local");
    assert!(names.contains(&"e2b"));
    for a in execseam::adapters() {
        assert!(execseam::KNOWN.contains(&a.name), "{}", a.name);
    }
    // The registry's order is KNOWN's: each line's feature is its adapter's name.
    let known: Vec<_> = execseam::KNOWN
        .iter()
        .filter(|k| names.contains(k))
        .copied()
        .collect();
    assert_eq!(names, known);
    let e = execseam::provider("no-such").err().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert!(e.message().contains("unknown adapter"), "{e}");
    // A configuration error is typed before any I/O.
    let e = execseam::provider_from("e2b", &BTreeMap::new())
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    if !names.contains(&"fly") {
        let e = execseam::provider("fly").err().unwrap();
        assert!(e.message().contains("not compiled in"), "{e}");
    }
}

/// Every adapter reads only the variables it declares (an undeclared one panics in the kit's
/// reader) and builds, or fails with `InvalidConfig`, without I/O, from a plausible value for
/// each (in a runtime: a gRPC channel is made lazily, but on the runtime).
#[tokio::test(flavor = "multi_thread")]
async fn every_adapter_reads_what_it_declares() {
    use execseam::VarKind;
    for a in execseam::adapters() {
        let value = |k: &str| {
            let v = a.vars.iter().find(|v| v.name == k)?;
            Some(match v.kind {
                VarKind::Url => "http://127.0.0.1:9".to_owned(),
                VarKind::Seconds | VarKind::Number => "7".to_owned(),
                VarKind::Flag => "1".to_owned(),
                VarKind::Choice(words) => words[0].to_owned(),
                VarKind::Secret => "a-secret".to_owned(),
                _ => "x".to_owned(),
            })
        };
        match a.build(&value) {
            Ok(p) => assert_eq!(p.provider(), a.name),
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{}: {e}", a.name),
        }
        assert!(
            !a.vars.is_empty() || a.name == "local",
            "{} declares no variables",
            a.name
        );
    }
}
