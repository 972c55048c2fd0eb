//! sandboxd's `ProcessService` in an emulated pod, reached the way the SDKs reach it: a
//! `pods/portforward` to port 9090 (kubernetes `pkg/kubelet/cri/streaming/portforward/
//! websocket.go`: `v4.channel.k8s.io`, a data and an error channel per port, each opened by the
//! port in 2 bytes little-endian), gRPC over that stream with stubs from the published proto.
//! Each expectation cites agent-sandbox's Go source at 2fd412d (`packages/sandboxd/pkg/server/
//! process.go`, `pkg/processmanager/managed_process.go`).

use std::time::Duration;

use execseam_emulator_kubernetes::{EmulatorOptions, KubernetesEmulator};
use execseam_kubernetes_proto as pb;
use futures_util::{SinkExt, StreamExt};
use pb::process_service_client::ProcessServiceClient;
use pb::start_response::Event;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};

const POD: &str = "sandboxd-pod";

fn field<'a>(kubeconfig: &'a str, key: &str) -> &'a str {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .expect("kubeconfig field")
        .trim()
}

/// One port-forward to the pod's 9090, as a byte stream.
async fn forward(emu: &KubernetesEmulator) -> tokio::io::DuplexStream {
    let kubeconfig = emu.kubeconfig();
    let server = field(&kubeconfig, "server:").replacen("http://", "ws://", 1);
    let token = field(&kubeconfig, "token:");
    let uri = format!("{server}/api/v1/namespaces/default/pods/{POD}/portforward?ports=9090");
    let (ws, answer) = tokio_websockets::ClientBuilder::from_uri(uri.parse().unwrap())
        .add_header(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        )
        .unwrap()
        .add_header(
            axum::http::header::SEC_WEBSOCKET_PROTOCOL,
            "v4.channel.k8s.io".parse().unwrap(),
        )
        .unwrap()
        .connect()
        .await
        .expect("the port-forward upgrade");
    assert_eq!(
        answer.headers()["sec-websocket-protocol"],
        "v4.channel.k8s.io"
    );
    let (mut tx, mut rx) = ws.split();
    // The first message on each channel is the port (9090 = 0x2382), and nothing else.
    for channel in [0u8, 1] {
        let m = rx.next().await.unwrap().unwrap();
        assert_eq!(&*m.into_payload(), &[channel, 0x82, 0x23][..]);
    }
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    let (mut r, mut w) = tokio::io::split(theirs);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n @ 1..) = r.read(&mut buf).await {
            let mut f = vec![0u8];
            f.extend_from_slice(&buf[..n]);
            if tx.send(tokio_websockets::Message::binary(f)).await.is_err() {
                return;
            }
        }
        let _ = tx.close().await;
    });
    tokio::spawn(async move {
        while let Some(Ok(m)) = rx.next().await {
            let p = m.into_payload();
            match p.first() {
                Some(0) if w.write_all(&p[1..]).await.is_err() => return,
                Some(1) => panic!("port-forward error: {}", String::from_utf8_lossy(&p[1..])),
                _ => {}
            }
        }
    });
    ours
}

async fn client(emu: &KubernetesEmulator) -> ProcessServiceClient<Channel> {
    let io = std::sync::Mutex::new(Some(forward(emu).await));
    let channel = Endpoint::from_static("http://sandboxd.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let io = io.lock().unwrap().take();
            async move {
                io.map(hyper_util::rt::TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("one connection per port-forward"))
            }
        }))
        .await
        .expect("gRPC over the port-forward");
    ProcessServiceClient::new(channel)
}

fn start(argv: &[&str]) -> pb::StartRequest {
    pb::StartRequest {
        config: Some(pb::ProcessConfig {
            command: argv.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        }),
        pty: None,
    }
}

/// Events until the stream ends: (process id, stdout, stderr, exit code).
async fn collect(
    mut s: tonic::Streaming<pb::StartResponse>,
) -> (i32, Vec<u8>, Vec<u8>, Option<i32>) {
    let (mut id, mut out, mut err, mut exit) = (0, Vec::new(), Vec::new(), None);
    while let Some(m) = s.message().await.expect("the Start stream") {
        match m.event.expect("an event") {
            Event::Init(i) => id = i.process_id,
            Event::Stdout(b) => out.extend_from_slice(&b),
            Event::Stderr(b) => err.extend_from_slice(&b),
            Event::Exit(e) => exit = Some(e.exit_code),
        }
    }
    (id, out, err, exit)
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxd_process_service_through_a_port_forward() {
    let emu = KubernetesEmulator::start(EmulatorOptions::default())
        .await
        .expect("the emulator starts");
    emu.apply(
        "default",
        &serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD},
            "spec": {"containers": [{
                "name": "sandboxd",
                "image": "us-central1-docker.pkg.dev/k8s-staging-images/agent-sandbox/sandboxd:latest-main",
                "ports": [{"containerPort": 9090}],
            }]},
        }),
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while emu.cluster().pod("default", POD).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the pod runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c = client(&emu).await;

    // Start: InitEvent first, stdout and stderr apart, ExitEvent last; cwd is the root
    // (`buildCommand`: cmd.Dir = rootDir, `--root-dir` default /workspace).
    let s = c
        .start(start(&["sh", "-c", "pwd; printf err >&2; exit 3"]))
        .await
        .unwrap()
        .into_inner();
    let (id, out, err, exit) = collect(s).await;
    assert!(id >= 1);
    assert_eq!(
        (&out[..], &err[..], exit),
        (&b"/workspace\n"[..], &b"err"[..], Some(3))
    );

    // stdin is a pipe open until WriteStdin{eof}.
    let mut s = c.start(start(&["cat"])).await.unwrap().into_inner();
    let Some(Event::Init(init)) = s.message().await.unwrap().unwrap().event else {
        panic!("InitEvent first")
    };
    for payload in [
        pb::write_stdin_request::Payload::Input(b"fed".to_vec().into()),
        pb::write_stdin_request::Payload::Eof(pb::google::protobuf::Empty {}),
    ] {
        c.write_stdin(pb::WriteStdinRequest {
            process_id: init.process_id,
            payload: Some(payload),
        })
        .await
        .unwrap();
    }
    let (_, out, _, exit) = collect(s).await;
    assert_eq!((&out[..], exit), (&b"fed"[..], Some(0)));

    // SendSignal(SIGKILL) reaches the group (`kill(-pid)`): the background child dies too, and a
    // signal death is ExitCode() = -1, whatever the signal.
    let mut s = c
        .start(start(&["sh", "-c", "sleep 30 & echo $!; wait"]))
        .await
        .unwrap()
        .into_inner();
    let Some(Event::Init(init)) = s.message().await.unwrap().unwrap().event else {
        panic!("InitEvent first")
    };
    let Some(Event::Stdout(child)) = s.message().await.unwrap().unwrap().event else {
        panic!("the child's pid")
    };
    c.send_signal(pb::SendSignalRequest {
        process_id: init.process_id,
        signal: pb::Signal::Sigkill.into(),
    })
    .await
    .unwrap();
    let (_, _, _, exit) = collect(s).await;
    assert_eq!(exit, Some(-1));
    let child = String::from_utf8_lossy(&child).trim().to_owned();
    let probe = c
        .start(start(&[
            "sh",
            "-c",
            &format!("kill -0 {child} 2>/dev/null; echo $?"),
        ]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(collect(probe).await.1, b"1\n", "the group's child is gone");

    // A process's own signal death is -1 as well.
    let s = c
        .start(start(&["sh", "-c", "kill -9 $$"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(collect(s).await.3, Some(-1), "kill -9 $$");

    // Errors are gRPC statuses, never exit codes.
    let e = c.start(start(&[])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = c
        .start(start(&["execseam-no-such-binary"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = c
        .send_signal(pb::SendSignalRequest {
            process_id: 999_999,
            signal: pb::Signal::Sigterm.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    // The exec path's faults reach sandboxd through the port-forward that carries it: a cut
    // stream ends after the first output, without its exit.
    emu.faults()
        .try_add(execseam_emulator_kit::FaultRule {
            route: "exec".into(),
            when: execseam_emulator_kit::When::Nth(1),
            fault: execseam_emulator_kit::Fault::CutBeforeExit,
        })
        .unwrap();
    let mut cut = client(&emu).await;
    let s = cut
        .start(start(&["sh", "-c", "printf before; sleep 1; printf after"]))
        .await
        .unwrap()
        .into_inner();
    let (_, out, _, exit) = collect(s).await;
    assert_eq!((&out[..], exit), (&b"before"[..], None));

    let mut escape = start(&["true"]);
    escape.config.as_mut().unwrap().cwd = Some("../etc".into());
    assert_eq!(
        c.start(escape).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
}
