//! The official clients against the emulator: the Kubernetes Python client (`kubernetes`) and the
//! agent-sandbox SDK (`k8s-agent-sandbox`), pinned in `interop/requirements.txt` and installed
//! into a virtualenv under the target directory. Each script states what the real API server,
//! controllers, router or runtime do, with its source. Fails loudly when PyPI cannot be reached.

use std::path::{Path, PathBuf};

use execseam_emulator_kit::Isolation;
use execseam_emulator_kubernetes::{EmulatorOptions, KubernetesEmulator, TEMPLATE, WARM_POOL};
use execseam_test_util::interop;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

async fn run(script: &str, checks: usize) {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "the Kubernetes interop checks need mount namespaces (root and unshare): pods are sandboxes with /app"
    );
    let emu = KubernetesEmulator::start(EmulatorOptions::with_token("interop-api-token"))
        .await
        .expect("the emulator starts");
    // The kubeconfig the emulator writes at start (what `execseam emulate` prints).
    let kubeconfig = emu.kubeconfig_path().to_owned();
    assert_eq!(
        std::fs::read_to_string(&kubeconfig).unwrap(),
        emu.kubeconfig()
    );
    let env = vec![
        ("KUBECONFIG".to_owned(), kubeconfig.display().to_string()),
        ("ROUTER_URL".to_owned(), emu.router_url()),
        ("ROUTER_TOKEN".to_owned(), emu.router_token().to_owned()),
        ("WARM_POOL".to_owned(), WARM_POOL.to_owned()),
        ("TEMPLATE".to_owned(), TEMPLATE.to_owned()),
        // Never the in-cluster configuration, whatever the host.
        ("KUBERNETES_SERVICE_HOST".to_owned(), String::new()),
    ];
    interop::python_checks("kubernetes", &dir(), script, env, checks).await;
    drop(emu);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_kubernetes_client_works_against_the_emulator() {
    run("kubernetes_check.py", 40).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_agent_sandbox_sdk_works_against_the_emulator() {
    run("agent_sandbox_check.py", 19).await;
}
