//! Adding an adapter, shown (issue 31): this crate implements the kit's `Adapter` trait and the
//! contract's `Provider` and `Sandbox`, and nothing else is written for it. The facade's registry
//! entry is `AdapterInfo::of::<Example>()`, what a line `(example, "example",
//! execseam_example::Example)` in the facade's list expands to; everything below goes through
//! that entry (the facade builds the provider from a variables map and wraps it in its tracing
//! layer) and then through the whole conformance suite. The example is not in the facade's own
//! list, so that the CLI's adapter table stays the providers'.

use std::collections::BTreeMap;
use std::sync::Arc;

use execseam::{AdapterInfo, ErrorKind, Exec, Provider, Sandbox, SandboxSpec};
use execseam_conformance::Target;
use execseam_example::Example;

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn root(test: &str) -> std::path::PathBuf {
    std::env::temp_dir()
        .canonicalize()
        .expect("a temp dir")
        .join(format!("execseam-example-{test}-{}", std::process::id()))
}

/// The facade's registry entry for the example: what its one line in the list expands to.
fn entry() -> AdapterInfo {
    AdapterInfo::of::<Example>()
}

/// The provider through the registry entry, from a variables map.
fn provider(root: &std::path::Path) -> Box<dyn Provider> {
    let vars = BTreeMap::from([(
        "EXECSEAM_EXAMPLE_ROOT".to_owned(),
        root.to_str().expect("UTF-8").to_owned(),
    )]);
    entry()
        .build(&|k: &str| vars.get(k).cloned())
        .expect("built without I/O")
}

#[test]
fn the_registry_entry_comes_from_the_type() {
    let info = entry();
    assert_eq!(info.name, "example");
    assert_eq!(info.env(), ["EXECSEAM_EXAMPLE_ROOT"]);
    assert!(info.lifecycle.create && info.lifecycle.destroy && !info.lifecycle.list);
    assert!(info.capabilities.remote_kill && !info.capabilities.streaming);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_passes_the_conformance_suite_through_the_facade() {
    let dir = root("conformance");
    std::fs::create_dir_all(&dir).expect("a root");
    let _cleanup = RemoveOnDrop(dir.clone());
    let provider: Arc<dyn Provider> = Arc::from(provider(&dir));
    let sandbox: Arc<dyn Sandbox> = Arc::from(
        provider
            .create(SandboxSpec::new())
            .await
            .expect("a sandbox"),
    );
    // A sandbox never issued, attached to with no I/O: the suite's "vanished sandbox" case.
    let vanished: Arc<dyn Sandbox> = Arc::from(
        provider
            .attach("example-neverissued")
            .expect("attach does no I/O"),
    );
    let count = {
        let dir = dir.clone();
        move || {
            std::fs::read_dir(&dir).map_or(0, |d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("example-"))
                    .count()
            })
        }
    };
    let target = Target::new("example", sandbox.clone() as Arc<dyn Exec>)
        .scratch(format!("{}/{}/scratch", dir.display(), sandbox.id()))
        .provider(provider.clone())
        .live_sandboxes(count)
        .vanished_sandbox(vanished as Arc<dyn Exec>)
        .missing_sandbox_id("example-missing");
    let report = execseam_conformance::run(&target, None).await;
    let failed: Vec<String> = report
        .cases
        .iter()
        .filter(|c| matches!(c.outcome, execseam_conformance::Outcome::Fail(_)))
        .map(|c| format!("{}: {:?}", c.name, c.outcome))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(report.passed() > 40, "{}", report.summary());
    drop(target);
    sandbox
        .close()
        .await
        .expect("close destroys what was created");
    assert_eq!(
        std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0),
        0,
        "every sandbox the suite created is gone"
    );
}

#[tokio::test]
async fn a_handle_closes_once_and_owns_what_it_created() {
    let dir = root("ownership");
    let _cleanup = RemoveOnDrop(dir.clone());
    let provider = provider(&dir);
    let created = provider.create(SandboxSpec::new()).await.expect("created");
    assert!(created.owned());
    let connected = provider.connect(created.id()).await.expect("connected");
    assert!(!connected.owned());
    connected.close().await.expect("releases only");
    assert!(
        dir.join(created.id()).is_dir(),
        "a connected handle keeps it"
    );
    created.close().await.expect("destroys");
    created.close().await.expect("a second close does nothing");
    assert!(!dir.join(created.id()).exists());
    let gone = provider.attach(created.id()).expect("no I/O");
    let e = gone
        .exec(execseam::Command::new(["true"]).expect("valid"))
        .await
        .expect_err("the sandbox is gone");
    assert_eq!(e.kind(), ErrorKind::NotFound);
}
