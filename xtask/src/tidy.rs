//! `cargo xtask tidy`: the repository's shape, checked where types cannot check it. The adapter
//! shape itself is a type (`execseam_adapter_kit::Adapter`, and the contract's `Provider` and
//! `Sandbox`): the compiler holds every adapter to it through the facade's registry, which lists
//! each adapter type. What is left for tidy: the files, the docs headings, the dependency rules
//! (only the contract, the kit and the tools protocol among our crates; the kit's feature for the
//! client stack the adapter uses; no crate the kit already wraps), the registry line, a
//! conformance run, and that the kit's plumbing is not written again (`docs/architecture.md`,
//! "Adding an adapter").
//!
//! The test `adapters_have_the_shape` runs the checks.

use std::path::Path;

use crate::root;

/// Adapters that have not been moved to the shape yet (their failures are expected; the test
/// fails if one of them passes, so it is removed from here when it is converted). New adapters
/// never go here.
pub const PENDING: &[&str] = &[];

/// The fixed headings of every `docs/adapters/<name>.md`, in order.
pub const DOC_HEADINGS: &[&str] = &[
    "## Configuration",
    "## Lifecycle",
    "## Capabilities",
    "## Degradations",
    "## Errors",
    "## Emulator",
    "## Not verified",
];

/// The workspace crates an adapter may depend on: the contract, the kit, and the tools protocol
/// (for adapters that serve tools natively).
pub const ADAPTER_DEPS: &[&str] = &[
    "execseam-core",
    "execseam-adapter-kit",
    "execseam-tools-protocol",
];

/// The files every adapter crate has.
pub const FILES: &[&str] = &[
    "Cargo.toml",
    "README.md",
    "src/lib.rs",
    "src/config.rs",
    "src/provider.rs",
    "src/exec.rs",
    "src/error.rs",
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Every `.rs` file under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push_str(&read(&p));
                out.push('\n');
            }
        }
    }
    out
}

/// The `[dependencies]` section of a manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    dependencies_in(manifest, |section| section == "[dependencies]")
}

/// Every dependency of a manifest, of any kind (normal, dev, build, per target).
fn all_dependencies(manifest: &str) -> Vec<String> {
    dependencies_in(manifest, |section| section.ends_with("dependencies]"))
}

/// The names listed in the sections of a manifest whose header `wanted` accepts.
fn dependencies_in(manifest: &str, wanted: impl Fn(&str) -> bool) -> Vec<String> {
    let mut deps = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = wanted(t);
            continue;
        }
        if inside
            && !t.is_empty()
            && !t.starts_with('#')
            && let Some(name) = t.split(['=', '.', ' ']).next()
        {
            deps.push(name.to_owned());
        }
    }
    deps
}

/// Whether a crate directory is on the emulators' side: the kit, an emulator, the umbrella, the
/// chaos proxy, a provider's generated protocol.
fn emulator_side(dir: &str) -> bool {
    dir.starts_with("emulator") || dir == "chaos" || dir.starts_with("proto-")
}

/// The layering rules between the emulators and the adapters (issue 32): no crate on the
/// emulators' side depends on an adapter (or the adapter kit), in any dependency section, so
/// nothing runs back up and an emulator stays independent of the client it checks; and the
/// published conformance suite depends on no emulator crate, so an outside adapter's author
/// does not pull the emulators. `crates` lists `(directory name, manifest)`.
pub fn check_layering(crates: &[(String, String)], adapters: &[String]) -> Vec<String> {
    let adapter_packages: Vec<String> = adapters
        .iter()
        .map(|a| format!("execseam-{a}"))
        .chain(["execseam-adapter-kit".to_owned()])
        .collect();
    let mut bad = Vec::new();
    for (dir, manifest) in crates {
        for dep in all_dependencies(manifest) {
            if emulator_side(dir) && adapter_packages.contains(&dep) {
                bad.push(format!(
                    "crates/{dir}: depends on the adapter crate {dep}: an emulator depends on \
                     the emulator kit and shared protocol crates (execseam-spawn, \
                     execseam-<p>-proto, execseam-<p>-contract), never on an adapter"
                ));
            }
            if dir == "conformance"
                && (dep.starts_with("execseam-emulator") || dep == "execseam-chaos")
            {
                bad.push(format!(
                    "crates/conformance: depends on {dep}: the suite owns the fault vocabulary \
                     and depends on no emulator"
                ));
            }
        }
    }
    bad
}

/// [`check_layering`] over the workspace's crates.
fn layering() -> Vec<String> {
    let crates: Vec<(String, String)> = crate_dirs()
        .iter()
        .map(|d| {
            (
                d.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                read(&d.join("Cargo.toml")),
            )
        })
        .collect();
    check_layering(&crates, &crate::adapters())
}

/// Checks one adapter; returns what is wrong (empty when it has the shape).
pub fn check_adapter(name: &str) -> Vec<String> {
    let dir = root().join("crates").join(format!("adapter-{name}"));
    let mut bad = Vec::new();
    let mut fail = |m: String| bad.push(format!("adapter {name}: {m}"));
    for f in FILES {
        if !dir.join(f).exists() {
            fail(format!("missing file {f}"));
        }
    }
    // The docs page.
    let page = read(&root().join("docs/adapters").join(format!("{name}.md")));
    if page.is_empty() {
        fail(format!("missing docs/adapters/{name}.md"));
    } else {
        let headings: Vec<&str> = page.lines().filter(|l| l.starts_with("## ")).collect();
        let mut at = 0;
        for want in DOC_HEADINGS {
            match headings[at..].iter().position(|h| h == want) {
                Some(i) => at += i + 1,
                None => fail(format!(
                    "docs/adapters/{name}.md lacks `{want}` (after the headings before it; fixed order: {})",
                    DOC_HEADINGS.join(", ")
                )),
            }
        }
    }
    let manifest = read(&dir.join("Cargo.toml"));
    if !manifest.contains(&format!("name = \"execseam-{name}\"")) {
        fail(format!("the package is not named execseam-{name}"));
    }
    for dep in dependencies(&manifest) {
        // The generated code of the provider's published proto, or its contract shared with
        // the emulator and the server, is its client's half.
        if dep.starts_with("execseam-")
            && !ADAPTER_DEPS.contains(&dep.as_str())
            && dep != format!("execseam-{name}-proto")
            && dep != format!("execseam-{name}-contract")
            // The local adapter's "client" is the process runner it shares with the emulators.
            && !(name == "local" && dep == "execseam-spawn")
        {
            fail(format!(
                "depends on {dep}: an adapter depends only on {} and its provider's client",
                ADAPTER_DEPS.join(", ")
            ));
        }
    }
    // Its conformance run: its emulator's target in the emulated binary (crates/emulator-<name>),
    // or a binary of its own for a backend that is not emulated (local, docker).
    let emulated = root()
        .join("crates")
        .join(format!("emulator-{name}"))
        .is_dir();
    let own = dir.join("tests/conformance.rs").exists();
    if !emulated && !own {
        fail(format!(
            "no conformance run: neither an emulator crate crates/emulator-{name} nor tests/conformance.rs"
        ));
    }
    if own && !manifest.contains("name = \"conformance\"\nharness = false") {
        fail("Cargo.toml lacks [[test]] name = \"conformance\" with harness = false".into());
    }
    if manifest.contains("[features]") && !manifest.contains("[package.metadata.docs.rs]") {
        fail("has features but no [package.metadata.docs.rs] all-features = true".into());
    }

    // The client stack goes through the kit's plumbing for it, and nothing the kit wraps is a
    // dependency of its own.
    let deps = dependencies(&manifest);
    let kit_line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("execseam-adapter-kit"))
        .unwrap_or_default();
    let kit_feature = |f: &str| kit_line.contains(&format!("\"{f}\""));
    for (client, feature) in [
        ("reqwest", "http"),
        ("tokio-websockets", "ws"),
        ("tonic", "grpc"),
    ] {
        // `ws` includes `http` and `websocket`; `websocket` alone serves a non-reqwest client.
        let enabled = kit_feature(feature)
            || (feature == "http" && kit_feature("ws"))
            || (feature == "ws" && kit_feature("websocket"));
        if deps.iter().any(|d| d == client) && !enabled {
            fail(format!(
                "depends on {client} without the kit's `{feature}` feature (its plumbing for {client})"
            ));
        }
    }
    for wrapped in KIT_WRAPS {
        if deps.iter().any(|d| d == wrapped) {
            fail(format!(
                "depends on {wrapped}: the kit wraps it (use execseam-adapter-kit)"
            ));
        }
    }

    // The facade lists the type: one registry line, behind a feature of the adapter's name. The
    // compiler then checks that the type implements the kit's `Adapter`.
    let facade = read(&root().join("crates/execseam/src/lib.rs"));
    let module = name.replace('-', "_");
    if !facade.contains(&format!("({module}, \"{name}\", execseam_{module}::")) {
        fail(format!(
            "the facade's registry (crates/execseam/src/lib.rs) has no line `({module}, \"{name}\", execseam_{module}::<Type>)`"
        ));
    }
    let facade_manifest = read(&root().join("crates/execseam/Cargo.toml"));
    if !facade_manifest.contains(&format!("\n{name} = [\"dep:execseam-{name}\"]")) {
        fail(format!(
            "the facade's Cargo.toml has no feature `{name} = [\"dep:execseam-{name}\"]`"
        ));
    }

    let lib = read(&dir.join("src/lib.rs"));
    if !lib.starts_with("#![doc = include_str!(\"../README.md\")]") {
        fail("src/lib.rs does not start with #![doc = include_str!(\"../README.md\")]".into());
    }
    // A provider's wire types are the adapter's own: never part of its semver surface.
    if lib
        .lines()
        .any(|l| l.trim_start().starts_with("pub mod wire"))
    {
        fail("src/lib.rs has `pub mod wire`: the provider's wire types stay private".into());
    }
    let readme = read(&dir.join("README.md"));
    if !readme.contains("```rust") {
        fail(
            "README.md has no Rust example (it is the crate docs; the example is a doctest)".into(),
        );
    }

    // The kit's plumbing, not copies of it (issue 31: one classifier, one client builder, one
    // Retry-After parser, one configuration parser).
    let all = sources(&dir.join("src"));
    for (copy, instead) in COPIES {
        if all.contains(copy) {
            fail(format!("src/ has `{copy}`: {instead}"));
        }
    }
    if deps.iter().any(|d| d == "reqwest") && all.contains("Client::builder()") {
        fail("builds a reqwest client: use execseam_adapter_kit::http::client".into());
    }

    bad
}

/// Crates the kit wraps: an adapter uses the kit's wrapper instead (`id`, `retry`, `ws`).
pub const KIT_WRAPS: &[&str] = &["fastrand", "rand", "httpdate", "sha1_smol"];

/// Code that re-writes the kit's plumbing, and what to use instead.
pub const COPIES: &[(&str, &str)] = &[
    (
        ".is_decode()",
        "classifies reqwest errors by hand: use execseam_adapter_kit::http::classify",
    ),
    (
        ".is_body()",
        "classifies reqwest errors by hand: use execseam_adapter_kit::http::classify",
    ),
    (
        "fn config_error",
        "use execseam_adapter_kit::vars::config_error (or the Vars reader)",
    ),
    (
        "fn retry_after(",
        "parses Retry-After: use execseam_adapter_kit::http::retry_after or retry::parse_retry_after",
    ),
    (
        "is not a number of seconds",
        "parses configuration by hand: use the kit's Vars reader",
    ),
    (
        "debug_span!(\"exec\"",
        "writes the per-exec span by hand: use execseam_adapter_kit::exec_span! (same name, fields and target)",
    ),
    (
        "RandomState",
        "a RandomState id generator: use execseam_adapter_kit::id::random_id",
    ),
];

/// The checks every crate under `crates/` passes (adapters and the rest): its README is its crate
/// docs, a library's README has a Rust example (a doctest), and a crate with features has
/// docs.rs metadata.
pub fn check_crate(dir: &Path) -> Vec<String> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut bad = Vec::new();
    let manifest = read(&dir.join("Cargo.toml"));
    if manifest.contains("[features]") && !manifest.contains("[package.metadata.docs.rs]") {
        bad.push(format!(
            "crates/{name}: has features but no [package.metadata.docs.rs] all-features = true"
        ));
    }
    let lib = dir.join("src/lib.rs");
    let (root, is_lib) = if lib.exists() {
        (lib, true)
    } else {
        (dir.join("src/main.rs"), false)
    };
    if !read(&root).starts_with("#![doc = include_str!(\"../README.md\")]") {
        bad.push(format!(
            "crates/{name}: {} does not start with #![doc = include_str!(\"../README.md\")]",
            root.strip_prefix(dir).unwrap_or(&root).display()
        ));
    }
    if is_lib && !read(&dir.join("README.md")).contains("```rust") {
        bad.push(format!(
            "crates/{name}: README.md has no Rust example (it is the crate docs; the example is a doctest)"
        ));
    }
    bad
}

/// Every crate directory under `crates/`.
fn crate_dirs() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(root().join("crates"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("Cargo.toml").exists())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `cargo xtask tidy`: prints every problem; fails if an adapter not in [`PENDING`] has one.
pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("unknown argument {a:?}"));
    }
    let mut failed = false;
    for name in crate::adapters() {
        let problems = check_adapter(&name);
        let pending = PENDING.contains(&name.as_str());
        for p in &problems {
            println!("{}{p}", if pending { "(pending) " } else { "" });
        }
        failed |= !pending && !problems.is_empty();
    }
    for dir in crate_dirs() {
        let problems = check_crate(&dir);
        for p in &problems {
            println!("{p}");
        }
        failed |= !problems.is_empty();
    }
    let problems = layering();
    for p in &problems {
        println!("{p}");
    }
    failed |= !problems.is_empty();
    if failed {
        Err("the adapter shape is broken (see docs/architecture.md, \"Adding an adapter\")".into())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapters_have_the_shape() {
        let mut problems = Vec::new();
        for name in crate::adapters() {
            let found = check_adapter(&name);
            if PENDING.contains(&name.as_str()) {
                if found.is_empty() {
                    problems.push(format!(
                        "adapter {name} has the shape now: remove it from tidy::PENDING"
                    ));
                }
            } else {
                problems.extend(found);
            }
        }
        assert!(
            problems.is_empty(),
            "see docs/architecture.md, \"Adding an adapter\":\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn crates_document_themselves() {
        let dirs = crate_dirs();
        assert!(dirs.len() > 10, "found only {} crates", dirs.len());
        let problems: Vec<String> = dirs.iter().flat_map(|d| check_crate(d)).collect();
        assert!(
            problems.is_empty(),
            "every crate's README is its crate docs:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn emulators_depend_on_no_adapter_and_conformance_on_no_emulator() {
        let problems = layering();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        // The check is not vacuous: an emulator with an adapter dev-dependency, and the suite
        // with an emulator, both fail.
        let broken = [
            (
                "emulator-x".to_owned(),
                "[dependencies]\nexecseam-emulator-kit.workspace = true\n[dev-dependencies]\nexecseam-x = { path = \"../adapter-x\" }\n".to_owned(),
            ),
            (
                "chaos".to_owned(),
                "[dependencies]\nexecseam-adapter-kit.workspace = true\n".to_owned(),
            ),
            (
                "conformance".to_owned(),
                "[dependencies]\nexecseam-emulators = { workspace = true }\n".to_owned(),
            ),
            (
                "reliability".to_owned(),
                "[dependencies]\nexecseam-x.workspace = true\nexecseam-emulators.workspace = true\n".to_owned(),
            ),
        ];
        let found = check_layering(&broken, &["x".to_owned()]);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("crates/emulator-x: depends on the adapter crate execseam-x"));
        assert!(found[1].contains("execseam-adapter-kit"));
        assert!(found[2].contains("crates/conformance: depends on execseam-emulators"));
    }

    #[test]
    fn pending_adapters_exist() {
        let all = crate::adapters();
        for p in PENDING {
            assert!(
                all.iter().any(|a| a == p),
                "tidy::PENDING names {p}, which does not exist"
            );
        }
    }

    #[test]
    fn the_checks_catch_a_broken_shape() {
        // A crate that does not exist fails on every file, so the checks are not vacuous.
        let found = check_adapter("no-such-adapter");
        assert!(
            found
                .iter()
                .any(|p| p.contains("missing file src/config.rs")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|p| p.contains("docs/adapters")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|p| p.contains("the facade's registry")),
            "{found:?}"
        );
        assert_eq!(
            dependencies(
                "[dependencies]\nexecseam-core.workspace = true\nfoo = \"1\"\n[dev-dependencies]\nbar = 1\n"
            ),
            ["execseam-core", "foo"]
        );
    }
}
