//! Local sandboxes: create, exec, connect, list, destroy, and the ownership rules.

use execseam_core::{
    Command, ErrorKind, Exec, ListFilter, Provider, Sandbox, SandboxSpec, SandboxState,
};
use execseam_local::{LocalConfig, LocalExec, LocalProvider};
use execseam_test_util::exec::command;

fn provider(root: &std::path::Path) -> LocalProvider {
    LocalProvider::new(LocalConfig::new().sandbox_root(root)).unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "execseam-local-lifecycle-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn sh(exec: &dyn Exec, script: &str) -> Result<String, execseam_core::Error> {
    let out = exec.exec(Command::new(["sh", "-c", script])?).await?;
    assert!(out.exit.success(), "{script}: {out:?}");
    Ok(String::from_utf8(out.stdout.to_vec()).unwrap())
}

#[tokio::test]
async fn create_exec_connect_list_destroy() {
    let root = scratch("full");
    let p = provider(&root);
    let a = p
        .create(
            SandboxSpec::new()
                .with_label("suite", "local-test")
                .with_env("GREETING", "hi there"),
        )
        .await
        .unwrap();
    assert!(a.owned());
    assert!(a.id().starts_with("local-"));
    let pwd = sh(&a, "pwd").await.unwrap();
    assert_eq!(pwd.trim(), a.workdir().unwrap());
    assert_eq!(sh(&a, "printf %s \"$GREETING\"").await.unwrap(), "hi there");
    sh(&a, "printf data > f").await.unwrap();

    let b = p.connect(a.id()).await.unwrap();
    assert!(!b.owned());
    assert_eq!(sh(&b, "cat f").await.unwrap(), "data");
    assert_eq!(
        sh(&b, "printf %s \"$GREETING\"").await.unwrap(),
        "hi there",
        "the sandbox env survives a connect"
    );

    let mine = p
        .list(&ListFilter::new().with_label("suite", "local-test"))
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id, a.id());
    assert_eq!(mine[0].state, SandboxState::Running);
    assert!(
        p.list(&ListFilter::new().with_label("suite", "other"))
            .await
            .unwrap()
            .is_empty()
    );

    // Closing a connected handle leaves the sandbox alone.
    b.close().await.unwrap();
    assert_eq!(sh(&a, "cat f").await.unwrap(), "data");

    a.close().await.unwrap();
    let e = a.exec(command(["true"])).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = b.exec(command(["true"])).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // Destroy is idempotent, through the handle and the provider.
    Sandbox::destroy(&a).await.unwrap();
    LocalProvider::destroy(&p, a.id()).await.unwrap();
    let e = p.connect(a.id()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(p.list(&ListFilter::new()).await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn ownership_decides_what_close_and_drop_do() {
    let root = scratch("own");
    let p = provider(&root);
    let kept = p.create(SandboxSpec::new()).await.unwrap();
    kept.set_owned(false);
    let id = kept.id().to_owned();
    kept.close().await.unwrap();
    drop(kept);
    let again = p.connect(&id).await.unwrap();
    again.set_owned(true);
    again.close().await.unwrap();
    assert_eq!(
        p.connect(&id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // The safety net: an owned sandbox dropped without close is removed.
    let dropped = p.create(SandboxSpec::new()).await.unwrap();
    let id = dropped.id().to_owned();
    drop(dropped);
    assert_eq!(
        p.connect(&id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn unsupported_spec_fields_and_bad_config_are_typed() {
    let root = scratch("spec");
    let p = provider(&root);
    let e = p
        .create(SandboxSpec::new().with_image("python:3.12"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let e = LocalProvider::new(LocalConfig::new().sandbox_root("relative")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    let e = p.connect("../../etc").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    // Through the trait object, as the facade uses it.
    let dynp: &dyn Provider = &p;
    let s = dynp.create(SandboxSpec::new()).await.unwrap();
    s.close().await.unwrap();
    // The host handle is not a sandbox.
    let host = LocalExec::new();
    assert_eq!(host.id(), "host");
    assert_eq!(
        Sandbox::destroy(&host).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    host.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&root);
}
