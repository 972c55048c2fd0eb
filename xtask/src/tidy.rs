//! `cargo xtask tidy`: the repository's shape, checked (rust-analyzer style). Every adapter crate
//! has the files, public items, configuration style, lifecycle implementation, core helpers and
//! docs headings that `docs/architecture.md` ("Adding an adapter") describes.
//!
//! The checks read the source as text: they are cheap and they name the file and the rule that
//! failed. The test `adapters_have_the_shape` runs them.

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

/// The body of `pub struct <name> { … }` in `src`, if any.
fn struct_body<'a>(src: &'a str, name: &str) -> Option<&'a str> {
    let start = src.find(&format!("pub struct {name} {{"))?;
    let rest = &src[start..];
    let end = rest.find("\n}")?;
    Some(&rest[..end])
}

/// The `[dependencies]` section of a manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut deps = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == "[dependencies]";
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

    let lib = read(&dir.join("src/lib.rs"));
    let provider = read(&dir.join("src/provider.rs"));
    let config = read(&dir.join("src/config.rs"));
    let exec = read(&dir.join("src/exec.rs"));
    let error = read(&dir.join("src/error.rs"));
    let all = sources(&dir.join("src"));

    if !lib.starts_with("#![doc = include_str!(\"../README.md\")]") {
        fail("src/lib.rs does not start with #![doc = include_str!(\"../README.md\")]".into());
    }
    let readme = read(&dir.join("README.md"));
    if !readme.contains("```rust") {
        fail(
            "README.md has no Rust example (it is the crate docs; the example is a doctest)".into(),
        );
    }
    for item in [
        format!("pub const PROVIDER: &str = \"{name}\";"),
        "pub const CAPABILITIES: Capabilities".to_owned(),
        "pub const LIFECYCLE: LifecycleCapabilities".to_owned(),
        "pub const VARS: &[Var]".to_owned(),
    ] {
        if !lib.contains(&item) {
            fail(format!("src/lib.rs lacks `{item}`"));
        }
    }

    // `P`: the CamelCase name, from `pub struct <P>Provider` in provider.rs.
    let p = provider
        .split("pub struct ")
        .skip(1)
        .filter_map(|s| s.split([' ', '{', '(', ';']).next())
        .find_map(|s| s.strip_suffix("Provider"))
        .map(str::to_owned);
    let Some(p) = p else {
        fail("src/provider.rs has no `pub struct <P>Provider`".into());
        return bad;
    };
    if p.to_lowercase() != name.replace('-', "") {
        fail(format!("{p}Provider does not name the adapter {name}"));
    }
    for item in [
        format!("{p}Config"),
        format!("{p}Provider"),
        format!("{p}Exec"),
    ] {
        let exported = lib.lines().any(|l| {
            l.trim_start().starts_with("pub use ")
                && l.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == item)
        }) || all_reexports(&lib).iter().any(|w| w == &item);
        if !exported {
            fail(format!("src/lib.rs does not re-export {item}"));
        }
    }

    // Configuration: builder-style, no public fields, one sync from_env and from_vars.
    match struct_body(&config, &format!("{p}Config")) {
        None => fail(format!(
            "src/config.rs has no `pub struct {p}Config {{ … }}`"
        )),
        Some(body) => {
            if body
                .lines()
                .skip(1)
                .any(|l| l.trim_start().starts_with("pub ") && !l.contains("pub(crate)"))
            {
                fail(format!("{p}Config has public fields (use setters)"));
            }
        }
    }
    if !config.contains(&format!("pub fn from_env() -> Result<{p}Config, Error>")) {
        fail(format!(
            "src/config.rs lacks `pub fn from_env() -> Result<{p}Config, Error>` (sync)"
        ));
    }
    if !config.contains("pub fn from_vars(") {
        fail(
            "src/config.rs lacks `pub fn from_vars(vars: impl Fn(&str) -> Option<String>)`".into(),
        );
    }
    if all.contains("async fn from_env") {
        fail("an `async fn from_env`: configuration is sync and does no I/O".into());
    }
    if config.contains("ErrorKind::InvalidCommand") {
        fail("src/config.rs reports InvalidCommand: configuration errors are InvalidConfig".into());
    }

    // The provider and the handle.
    for (file, src, item) in [
        (
            "provider.rs",
            &provider,
            format!("impl Provider for {p}Provider"),
        ),
        (
            "provider.rs",
            &provider,
            format!("pub fn new(config: {p}Config) -> Result<{p}Provider, Error>"),
        ),
        (
            "provider.rs",
            &provider,
            format!("pub fn from_env() -> Result<{p}Provider, Error>"),
        ),
        ("exec.rs", &exec, format!("impl Exec for {p}Exec")),
        ("exec.rs", &exec, format!("impl Sandbox for {p}Exec")),
    ] {
        if !src.contains(&item) {
            fail(format!("src/{file} lacks `{item}`"));
        }
    }
    // Against the declared LIFECYCLE, or `self.lifecycle()` where the provider's lifecycle
    // depends on its configuration (docker: warm or per call).
    let checks = |what: &str| {
        provider.contains(&format!("{what}.check(PROVIDER, &LIFECYCLE)"))
            || provider.contains(&format!("{what}.check(PROVIDER, &self.lifecycle())"))
    };
    if provider.contains("fn create(") && !checks("spec") {
        fail("src/provider.rs creates without `spec.check(PROVIDER, &LIFECYCLE)`".into());
    }
    if provider.contains("fn list(") && !checks("filter") {
        fail("src/provider.rs lists without `filter.check(PROVIDER, &LIFECYCLE)`".into());
    }

    // The core transport helpers, not copies.
    let remote =
        manifest.contains("reqwest") || manifest.contains("tonic") || manifest.contains("aws-");
    if remote && !error.contains("execseam_adapter_kit") {
        fail("src/error.rs does not use the adapter kit's retry classes".into());
    }
    if all.contains("RandomState") {
        fail("a RandomState id generator: use execseam_adapter_kit::id::random_id".into());
    }
    let lower = all.to_lowercase();
    if (lower.contains("retry_after") || lower.contains("retry-after"))
        && all.contains("HeaderMap")
        && !all.contains("parse_retry_after")
    {
        fail("reads Retry-After without retry::parse_retry_after".into());
    }
    if manifest.contains("reqwest") && !all.contains("without_url") {
        fail("a reqwest adapter that never calls without_url()".into());
    }
    if all.contains(".source()") && all.contains("push_str(\": \")") && !all.contains("error_chain")
    {
        fail("flattens error chains by hand: use text::error_chain".into());
    }

    bad
}

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

/// Names inside `pub use x::{A, B};` blocks spanning several lines.
fn all_reexports(lib: &str) -> Vec<String> {
    let mut out = Vec::new();
    for block in lib.split("pub use ").skip(1) {
        let end = block.find(';').unwrap_or(block.len());
        out.extend(
            block[..end]
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    out
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
        assert_eq!(
            dependencies(
                "[dependencies]\nexecseam-core.workspace = true\nfoo = \"1\"\n[dev-dependencies]\nbar = 1\n"
            ),
            ["execseam-core", "foo"]
        );
        assert!(struct_body("pub struct XConfig {\n    pub a: u8,\n}", "XConfig").is_some());
    }
}
