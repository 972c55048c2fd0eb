//! The adapter against a fake API server (tests/fake): exec over v5 and v4, the status channel,
//! refused upgrades, a socket without a status, the claim lifecycle, and what reaches the URL.

mod fake;

use std::time::Duration;

use execseam_core::{Command, ErrorKind, Exec, Exit, Provider, Retry, Sandbox, SandboxSpec};
use execseam_kubernetes::{KubernetesConfig, KubernetesProvider, Protocol};
use execseam_test_util::exec;
use execseam_test_util::exec::{assert_error, command, sh, stream_of};
use fake::{Fake, Fault, POD};

fn provider(
    fake: &Fake,
    config: impl FnOnce(KubernetesConfig) -> KubernetesConfig,
) -> KubernetesProvider {
    let c = KubernetesConfig::new()
        .server(fake.url())
        .token("t0ken-never-logged")
        .namespace(fake::NS)
        .warm_pool("pool")
        .request_timeout(Duration::from_secs(10))
        .ready_timeout(Duration::from_secs(10));
    KubernetesProvider::new(config(c)).unwrap()
}

fn pod_mode(c: KubernetesConfig) -> KubernetesConfig {
    c.mode(execseam_kubernetes::Mode::Pod).image("busybox")
}

#[tokio::test]
async fn exec_over_v5_keeps_streams_exit_and_stdin_exact() {
    let fake = Fake::start().await;
    let p = provider(&fake, pod_mode);
    let s = p.attach(POD).unwrap();
    let out = s.exec(sh("printf o; printf e >&2; exit 3")).await.unwrap();
    assert_eq!(
        (&out.stdout[..], &out.stderr[..], out.exit),
        (&b"o"[..], &b"e"[..], Exit::Code(3))
    );
    assert_eq!(s.protocol(), Some(Protocol::V5));
    let all: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
    let out = exec::cat(&s, &all).await;
    assert_eq!(out.stdout.len(), all.len());
    assert!(out.stdout[..] == all[..] && out.exit == Exit::Code(0));
    let out = s
        .exec(
            Command::builder(["sh", "-c", "pwd; printf '%s' \"$SECRET\""])
                .workdir("/")
                .env("SECRET", "hunter2 with\nnewline")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(&out.stdout[..], b"/\nhunter2 with\nnewline", "{out:?}");
    // Env values never reach a URL (the audit log sees URLs); the token is a header.
    let requests = fake.with(|s| s.requests.join("\n"));
    assert!(!requests.contains("hunter2"), "{requests}");
    assert!(!requests.contains("t0ken"), "{requests}");
    // A missing workdir is the wrapper's typed error, not the command's exit.
    let e = exec::in_missing_workdir(&s, &["pwd"], "/no/such").await;
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test]
async fn a_v4_only_server_gets_stdin_by_length() {
    let fake = Fake::start().await;
    fake.with(|s| s.protocols = vec!["v4.channel.k8s.io"]);
    let p = provider(&fake, pod_mode);
    let s = p.attach(POD).unwrap();
    let out = s
        .exec(
            Command::builder(["cat"])
                .stdin(&b"over v4\n"[..])
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(&out.stdout[..], b"over v4\n");
    assert_eq!(s.protocol(), Some(Protocol::V4));
    // The first attempt offered only v5 and was refused before anything ran.
    let execs = fake.with(|s| s.execs.clone());
    assert_eq!(execs.len(), 1, "{execs:?}");
    let out = s.exec(sh("exit 7")).await.unwrap();
    assert_eq!(out.exit, Exit::Code(7));
}

#[tokio::test]
async fn a_socket_without_a_status_is_an_error_never_an_exit() {
    let fake = Fake::start().await;
    let p = provider(&fake, |c| pod_mode(c).remote_kill(false));
    let s = p.attach(POD).unwrap();
    fake.with(|s| s.fault = Some(Fault::NoStatus));
    let e = s.exec(sh("printf partial")).await.unwrap_err();
    assert_error(&e, ErrorKind::Unavailable, Retry::Unsafe);
    assert_eq!(&e.partial().unwrap().stdout[..], b"partial");
    fake.with(|s| s.fault = Some(Fault::BadStatus));
    let e = s.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    fake.with(|s| s.fault = Some(Fault::Internal));
    let e = s.exec(sh("true")).await.unwrap_err();
    assert_error(&e, ErrorKind::Internal, Retry::Unsafe);
    fake.with(|s| s.fault = None);
    let e = s
        .exec(command(["execseam-no-such-program"]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = p
        .attach("gone-pod")
        .unwrap()
        .exec(sh("true"))
        .await
        .unwrap_err();
    assert_error(&e, ErrorKind::NotFound, Retry::Never);
}

#[tokio::test]
async fn a_dropped_exec_is_killed_by_its_tag() {
    let fake = Fake::start().await;
    let p = provider(&fake, pod_mode);
    let s = p.attach(POD).unwrap();
    let pidfile = format!("/tmp/execseam-k8s-kill-{}", std::process::id());
    let script = format!("echo $$ > {pidfile}.w; mv {pidfile}.w {pidfile}; sleep 30 & wait");
    // Dropped as soon as the command runs (its pid is written), not after a fixed time: the
    // client may not have read the upgrade's answer yet, and the command runs all the same. The
    // kill was armed only once the socket was open, so a drop in that window (700 ms under a
    // load of 13-16) left the command running: this failed then, and fails without the fix.
    let mut exec = Box::pin(s.exec(sh(&script)));
    let mut pid = None;
    for _ in 0..1500 {
        tokio::select! {
            r = &mut exec => panic!("the exec should still run: {r:?}"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if let Ok(p) = std::fs::read_to_string(&pidfile) {
            pid = Some(p.trim().to_owned());
            break;
        }
    }
    drop(exec);
    let pid = pid.expect("the command started within 30 s");
    std::fs::remove_file(&pidfile).unwrap();
    // The kill exec runs in the background; the shell and its child die. The kill is one more
    // exec through the fake API server: under a load of 13-16 on 2 cores it took more than 5 s
    // (the poll ends as soon as it is done, so a long window costs nothing when it passes).
    let mut gone = false;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Killed but not reaped yet (the fake's child) is a zombie: state Z.
        if state.is_empty() || state.split(' ').nth(2) == Some("Z") {
            gone = true;
            break;
        }
    }
    if !gone {
        let reaped = execseam_adapter_kit::reaper::drain(Duration::ZERO).await;
        let execs = fake.with(|s| s.execs.clone());
        panic!(
            "pid {pid} still runs; reaper: {}; execs: {execs:?}",
            reaped.describe()
        );
    }
    assert!(fake.with(|s| {
        s.execs
            .iter()
            .any(|a| a.get(3).is_some_and(|x| x == "execseam-kill"))
    }));
}

#[tokio::test]
async fn an_upgrade_without_an_answer_is_killed_before_the_error() {
    // The server may have started the command (it does at the upgrade) and never answered:
    // the error is `Unsafe`, and the command is killed by its tag before it is returned.
    let fake = Fake::start().await;
    fake.with(|s| s.fault = Some(Fault::NoAnswer));
    let p = provider(&fake, |c| {
        pod_mode(c).request_timeout(Duration::from_secs(2))
    });
    let s = p.attach(POD).unwrap();
    let pidfile = format!("/tmp/execseam-k8s-noanswer-{}", std::process::id());
    let script = format!("echo $$ > {pidfile}.w; mv {pidfile}.w {pidfile}; exec sleep 30");
    let e = s.exec(sh(&script)).await.unwrap_err();
    assert_eq!(e.retry(), Retry::Unsafe, "{e}");
    let pid = std::fs::read_to_string(&pidfile).expect("the command started");
    std::fs::remove_file(&pidfile).unwrap();
    let state = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    // Killed (a zombie until the fake reaps it) or gone, when the error came back.
    assert!(
        state.is_empty() || state.split(' ').nth(2) == Some("Z"),
        "pid {pid} still runs: {state}"
    );
    assert!(fake.with(|s| {
        s.execs
            .iter()
            .any(|a| a.get(3).is_some_and(|x| x == "execseam-kill"))
    }));
}

#[tokio::test]
async fn the_claim_lifecycle() {
    let fake = Fake::start().await;
    let p = provider(&fake, |c| c);
    let s = p
        .create(SandboxSpec::new().with_label("team", "a"))
        .await
        .unwrap();
    assert!(s.id().starts_with("execseam-"));
    assert_eq!(s.pod().await.unwrap(), POD);
    let out = s.exec(sh("echo hi")).await.unwrap();
    assert_eq!(&out.stdout[..], b"hi\n");
    let body = fake.with(|st| st.claims.get(s.id()).cloned().unwrap());
    assert_eq!(body["spec"]["warmPoolRef"]["name"], "pool");
    assert_eq!(body["metadata"]["labels"]["team"], "a");
    assert_eq!(
        body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "execseam"
    );
    let id = s.id().to_owned();
    s.close().await.unwrap();
    let e = s.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    p.destroy(&id).await.unwrap(); // already gone: Ok
    let e = p.attach(&id).unwrap().exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // A claim on a pool that does not exist fails with the controller's reason, and is deleted.
    let e = p
        .create(SandboxSpec::new().with_image("missing-pool"))
        .await
        .unwrap_err();
    assert_error(&e, ErrorKind::NotFound, Retry::Never);
    assert!(e.message().contains("WarmPoolNotFound"), "{e}");
    assert!(fake.with(|s| s.claims.is_empty()));
    // Bad labels are refused before any request.
    let before = fake.with(|s| s.requests.len());
    let e = p
        .create(SandboxSpec::new().with_label("team", "not a label value"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert_eq!(fake.with(|s| s.requests.len()), before);
}

#[tokio::test]
async fn an_error_answer_longer_than_the_quote_is_still_the_status() {
    // The status decides; a long error body is quoted in part, never an error of its own (was
    // a size failure when the adapter read error answers with a limit).
    let fake = Fake::start().await;
    fake.with(|s| s.error_padding = 256 << 10);
    let p = provider(&fake, |c| c);
    let e = p
        .attach("execseam-never-issued")
        .unwrap()
        .exec(sh("true"))
        .await
        .unwrap_err();
    assert_error(&e, ErrorKind::NotFound, Retry::Never);
    assert!(fake.with(|s| {
        s.requests
            .iter()
            .any(|r| r.starts_with("GET ") && r.contains("/sandboxclaims/execseam-never-issued"))
    }));
}

#[tokio::test]
async fn streaming_delivers_frames_then_one_exit() {
    let fake = Fake::start().await;
    let p = provider(&fake, pod_mode);
    let s = p.attach(POD).unwrap();
    let mut st = stream_of(&s, sh("echo a; sleep 0.2; echo b >&2; exit 4")).await;
    let mut events = Vec::new();
    while let Some(e) = st.next().await {
        events.push(e.unwrap());
    }
    use execseam_core::Event;
    assert_eq!(events.last(), Some(&Event::Exit(Exit::Code(4))));
    assert!(events.contains(&Event::Stdout("a\n".into())));
    assert!(events.contains(&Event::Stderr("b\n".into())));
    let _: &dyn Provider = &p;
}
