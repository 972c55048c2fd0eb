//! The facade's example, run against the local adapter and the E2B emulator; the registry's
//! errors. Needs the `local` and `e2b` features (the workspace build has every adapter, through
//! the CLI; alone: `cargo test -p execseam --features e2b`).

#[cfg(all(feature = "local", feature = "e2b"))]
#[path = "facade/cases.rs"]
mod cases;

/// Without the features the cases do not exist: fail loudly rather than pass with 0 tests.
#[cfg(not(all(feature = "local", feature = "e2b")))]
#[test]
fn the_facade_tests_need_the_local_and_e2b_features() {
    panic!(
        "run `cargo test -p execseam --features e2b` (the workspace build enables every adapter)"
    );
}
