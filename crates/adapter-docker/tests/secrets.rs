//! No env value reaches a log at any level: the container-wide env (the config's and a sandbox
//! spec's) and a command's own, in both modes, with every `log` record (bollard logs request
//! bodies at TRACE/DEBUG and every decoded answer at DEBUG, `decode_response` in bollard 0.21.1
//! `src/docker.rs`) and every `tracing` record of the process captured at TRACE.
//!
//! Needs a container engine (`support`: the tests start the repository's podman).

mod support;

use execseam_core::{Command, Exec, ListFilter, Sandbox, SandboxSpec};
use execseam_docker::Mode;
use support::{config, provider, sweep};

const CONFIG_SECRET: &str = "cfg-PLANTED-docker-5e4d3c2b";
const SPEC_SECRET: &str = "spec-PLANTED-docker-1a2b3c4d";
const EXEC_SECRET: &str = "exec-PLANTED-docker-9f8e7d6c";

/// A command that prints `same` when `$K` equals `$1$2` (argv is not a secret by the contract,
/// and bollard logs it: the secret itself is never in argv).
fn check(var: &str, secret: &str) -> Command {
    let (head, tail) = secret.split_at(secret.len() / 2);
    let script = format!("[ \"${var}\" = \"$1$2\" ] && echo same");
    Command::new(["sh", "-c", &script, "sh", head, tail]).expect("valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_env_value_reaches_any_log_at_trace() {
    let log = execseam_test_util::capture::install();
    let suite = "secrets";
    sweep(suite).await;
    for mode in [Mode::Warm, Mode::PerCall] {
        let config = config(suite).mode(mode).env("C", CONFIG_SECRET);
        let exec = provider(&config)
            .create(SandboxSpec::new().with_env("S", SPEC_SECRET))
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: a sandbox: {e}"));
        for (var, secret) in [("C", CONFIG_SECRET), ("S", SPEC_SECRET)] {
            let o = exec.exec(check(var, secret)).await.unwrap();
            assert_eq!(
                o.stdout, "same\n",
                "{mode:?}: the container-wide {var}: {o:?}"
            );
        }
        // The command's own env overrides the container-wide one.
        let mut c = check("S", EXEC_SECRET).into_builder();
        c = c.env("S", EXEC_SECRET);
        let o = exec.exec(c.build().unwrap()).await.unwrap();
        assert_eq!(o.stdout, "same\n", "{mode:?}: the command's own S: {o:?}");
        // What the engine says about the sandbox's containers (inspected, listed) is logged
        // too: it must not hold the values either.
        let p = provider(&config);
        let _ = p.connect(exec.id()).await;
        let _ = p.list(&ListFilter::default()).await;
        exec.destroy().await.unwrap();
    }
    assert!(
        log.has_target("bollard"),
        "the capture saw bollard's records (else it proves nothing)"
    );
    for secret in [CONFIG_SECRET, SPEC_SECRET, EXEC_SECRET] {
        if let Some(line) = log.find(secret.as_bytes()) {
            panic!("{secret} reached a log: {line}");
        }
    }
}
