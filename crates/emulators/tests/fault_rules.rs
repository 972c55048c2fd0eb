//! An emulator refuses, when it starts, a fault rule for a route it does not have or a fault
//! its route does not render: a rule is never accepted and then silently ignored.

use execseam_emulators::EmulatorOptions;

fn options(rule: &str) -> EmulatorOptions {
    EmulatorOptions {
        faults: vec![rule.parse().unwrap()],
        ..EmulatorOptions::default()
    }
}

#[tokio::test]
async fn unknown_routes_and_unrendered_faults_are_refused_at_start() {
    use execseam_emulators::{daytona, e2b};
    for rule in [
        "create=malformed",
        "create=cut",
        "create=vanish",
        "nope=500",
    ] {
        let e = e2b::E2bEmulator::start(options(rule)).await.err();
        let e = e.unwrap_or_else(|| panic!("e2b accepted {rule}"));
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    }
    for rule in [
        "create=500",
        "create=reset",
        "create=malformed",
        "session=500",
    ] {
        assert!(
            daytona::DaytonaEmulator::start(options(rule))
                .await
                .is_err(),
            "daytona accepted {rule}"
        );
    }
    // What is rendered is accepted.
    for rule in ["create=429:1", "exec=cut@2", "*=503@always"] {
        e2b::E2bEmulator::start(options(rule)).await.unwrap();
    }
    daytona::DaytonaEmulator::start(options("session=vanish"))
        .await
        .unwrap();
}
