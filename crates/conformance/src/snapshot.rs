//! Named insta snapshots shared by every adapter.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::Outcome;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots");

/// Compares `value` with the snapshot `name` (the same file for every adapter).
pub(crate) fn check(name: &str, value: &str) -> Result<(), Outcome> {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(DIR);
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    // insta reports a mismatch by panicking after printing its diff; keep the diff, drop the
    // panic message and backtrace (the case's report line says what failed).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = catch_unwind(AssertUnwindSafe(|| {
        settings.bind(|| insta::assert_snapshot!(name, value));
    }));
    std::panic::set_hook(hook);
    if result.is_ok() {
        return Ok(());
    }
    let stored = std::fs::read_to_string(format!("{DIR}/{name}.snap")).ok();
    let want = stored
        .as_deref()
        .and_then(|s| s.splitn(3, "---\n").nth(2))
        .map(|s| s.trim_end_matches('\n').to_owned());
    Err(Outcome::Fail(match want {
        Some(want) => format!(
            "snapshot {name} differs\n{}",
            crate::cases::diff(&want, value)
        ),
        None => format!("snapshot {name} is missing (run with INSTA_UPDATE=always to create it)"),
    }))
}
