//! The README stays true: its adapter table is what `execseam adapters --markdown` prints, and its
//! Rust example is the compiled `crates/adapter-local/examples/readme.rs`.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

#[test]
fn the_adapter_table_is_generated() {
    let out = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["adapters", "--markdown"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let readme = readme();
    let start = readme.find("<!-- adapters:start").expect("start marker");
    let body_start = start + readme[start..].find('\n').unwrap() + 1;
    let end = readme.find("<!-- adapters:end -->").expect("end marker");
    assert_eq!(
        &readme[body_start..end],
        table,
        "README's adapter table is stale: replace it with `execseam adapters --markdown`"
    );
}

#[test]
fn the_example_is_the_compiled_one() {
    let example =
        std::fs::read_to_string(root().join("crates/adapter-local/examples/readme.rs")).unwrap();
    let readme = readme();
    let start = readme.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let end = start + readme[start..].find("```").unwrap();
    assert_eq!(
        &readme[start..end],
        example,
        "README's example differs from examples/readme.rs"
    );
}

#[test]
fn the_set_up_commands_are_the_ones_ci_runs() {
    let readme = readme();
    assert!(readme.contains("cargo xtask conformance --adapter local"));
    assert!(readme.contains("cargo test --workspace"));
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("cargo test --workspace"),
        ".ci/run must call the README's test command"
    );
}
