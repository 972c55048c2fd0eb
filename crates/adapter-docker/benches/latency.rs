//! The adapter's latency per command, warm and per call, each measured side by side (alternating)
//! with the same engine calls made directly through bollard: warm, create/start/inspect of an
//! exec; per call, also create/start/remove of the container. Prints medians and ratios.
//!
//! Needs the engine the tests use (`.ci/podman start && . target/podman/env`).
//! `cargo bench -p execseam-docker` (or `cargo xtask bench`). `EXECSEAM_BENCH_SCALE=0.1` shortens it.

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use execseam_core::{Command, Exec, Sandbox, SandboxSpec};
use execseam_docker::{DockerConfig, DockerExec, DockerProvider, Mode};
use execseam_test_util::bench;
use futures_util::StreamExt;

fn host_config(c: &DockerConfig) -> HostConfig {
    let ulimits = std::env::var("EXECSEAM_DOCKER_ULIMITS").unwrap_or_default();
    HostConfig {
        init: Some(true),
        network_mode: Some("none".into()),
        runtime: std::env::var("EXECSEAM_DOCKER_RUNTIME").ok(),
        auto_remove: Some(c.current_mode() == Mode::PerCall),
        ulimits: Some(
            ulimits
                .split(',')
                .filter(|u| !u.is_empty())
                .map(|u| {
                    let u: execseam_docker::Ulimit = u.parse().expect("ulimit");
                    ResourcesUlimits {
                        name: Some(u.name),
                        soft: Some(u.soft),
                        hard: Some(u.hard),
                    }
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// One exec straight through bollard: create, start attached, read to the end, inspect.
async fn raw_exec(d: &Docker, id: &str, argv: &[&str]) -> (usize, i64) {
    let e = d
        .create_exec(
            id,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(argv.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            },
        )
        .await
        .expect("create exec");
    let mut n = 0;
    if let StartExecResults::Attached { mut output, .. } =
        d.start_exec(&e.id, None).await.expect("start exec")
    {
        while let Some(item) = output.next().await {
            if let Ok(LogOutput::StdOut { message } | LogOutput::StdErr { message }) = item {
                n += message.len();
            }
        }
    }
    let code = d
        .inspect_exec(&e.id)
        .await
        .expect("inspect")
        .exit_code
        .expect("code");
    (n, code)
}

async fn raw_container(d: &Docker, c: &DockerConfig, keepalive: &[&str]) -> String {
    let id = d
        .create_container(
            None::<CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(c.image_name().to_owned()),
                entrypoint: Some(keepalive.iter().map(|s| s.to_string()).collect()),
                cmd: Some(Vec::new()),
                host_config: Some(host_config(c)),
                labels: Some([("io.execseam.test".to_string(), "bench".to_string())].into()),
                ..Default::default()
            },
        )
        .await
        .expect("create container")
        .id;
    d.start_container(&id, None).await.expect("start container");
    id
}

async fn raw_remove(d: &Docker, id: &str) {
    let _ = d
        .remove_container(
            id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await;
}

async fn seam(exec: &DockerExec, argv: &[&str]) -> (usize, i64) {
    let o = exec
        .exec(Command::new(argv.iter().copied()).expect("valid"))
        .await
        .expect("exec");
    (
        o.stdout.len() + o.stderr.len(),
        i64::from(o.exit.code().expect("code")),
    )
}

async fn compare<A, B>(name: &str, iterations: usize, mut adapter: A, mut baseline: B)
where
    A: AsyncFnMut() -> (usize, i64),
    B: AsyncFnMut() -> (usize, i64),
{
    assert_eq!(
        adapter().await,
        baseline().await,
        "{name}: both paths must agree"
    );
    let medians = bench::alternate(iterations, adapter, baseline).await;
    bench::report(
        name,
        ["execseam-docker", "bollard direct"],
        medians,
        iterations,
    );
}

fn main() {
    if !bench::under_cargo_bench("latency", "execseam-docker") {
        return;
    }
    let n = |base: usize| bench::count(base, 3);
    bench::runtime(Some(2)).block_on(async {
        let config = DockerConfig::from_env()
            .unwrap_or_else(|e| {
                panic!("{e}: start the engine with `.ci/podman start && . target/podman/env`")
            })
            .label("io.execseam.test", "bench");
        let d = Docker::connect_with_defaults()
            .expect("DOCKER_HOST")
            .negotiate_version()
            .await
            .expect("engine");
        let warm = DockerProvider::new(config.clone())
            .expect("config")
            .create(SandboxSpec::new())
            .await
            .expect("warm container");
        let id = warm.id().to_owned();
        compare(
            "warm: true",
            n(60),
            async || seam(&warm, &["true"]).await,
            async || raw_exec(&d, &id, &["true"]).await,
        )
        .await;
        let big = ["head", "-c", "8388608", "/dev/zero"];
        compare(
            "warm: 8 MiB stdout",
            n(20),
            async || seam(&warm, &big).await,
            async || raw_exec(&d, &id, &big).await,
        )
        .await;
        warm.close().await.expect("close");

        let per_call_config = config.clone().mode(Mode::PerCall);
        let per_call = DockerProvider::new(per_call_config.clone())
            .expect("config")
            .create(SandboxSpec::new())
            .await
            .expect("per-call sandbox");
        compare(
            "per call: true",
            n(30),
            async || seam(&per_call, &["true"]).await,
            async || {
                let id = raw_container(&d, &per_call_config, &["sleep", "3600"]).await;
                let r = raw_exec(&d, &id, &["true"]).await;
                raw_remove(&d, &id).await;
                r
            },
        )
        .await;
    });
}
