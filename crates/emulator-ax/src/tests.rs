//! The guest's behaviour, checked on the wire: raw HTTP/2 with hand-built gRPC frames, and the
//! generated stubs for the error codes, limits, offsets and files.

use std::time::Duration;

use bytes::Bytes;
use execseam_ax_proto::file_system_service_client::FileSystemServiceClient;
use execseam_ax_proto::process_service_client::ProcessServiceClient;
use execseam_ax_proto::{
    GetProcessRequest, ReadFileRequest, SignalProcessRequest, StartProcessRequest,
    StreamProcessOutputRequest, WriteFileRequest, WriteProcessInputRequest, process_output::Output,
};
use tonic::Code;
use tonic::transport::Channel;

use super::AxEmulator;
use execseam_emulator_kit::EmulatorOptions;

async fn emulator() -> (AxEmulator, Channel) {
    let emu = AxEmulator::start(EmulatorOptions::default()).await.unwrap();
    let channel = Channel::from_shared(format!("http://{}", emu.endpoint()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (emu, channel)
}

fn start(argv: &[&str]) -> StartProcessRequest {
    StartProcessRequest {
        command: argv.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

async fn collect(
    c: &mut ProcessServiceClient<Channel>,
    id: &str,
    offsets: (i64, i64),
    follow: bool,
) -> (Vec<u8>, Vec<u8>, Option<i32>) {
    let mut s = c
        .stream_process_output(StreamProcessOutputRequest {
            process_id: id.into(),
            stdout_offset: offsets.0,
            stderr_offset: offsets.1,
            follow,
        })
        .await
        .unwrap()
        .into_inner();
    let (mut o, mut e, mut x) = (Vec::new(), Vec::new(), None);
    while let Some(m) = s.message().await.unwrap() {
        match m.output {
            Some(Output::Stdout(b)) => o.extend_from_slice(&b),
            Some(Output::Stderr(b)) => e.extend_from_slice(&b),
            Some(Output::Exit(p)) => x = Some(p.exit_code),
            None => {}
        }
    }
    (o, e, x)
}

/// A hand-built request frame (`0`, big-endian length, `StartProcessRequest{1: "true"}`) over
/// plain HTTP/2, and the answer read by hand: `Process{1: "proc-" + 24 hex, 2: "true", 3: pid,
/// 4: RUNNING or EXITED, 6: started_at}`.
#[tokio::test(flavor = "multi_thread")]
async fn start_process_on_the_wire() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (emu, _) = emulator().await;
    let http = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let body: Vec<u8> = vec![0, 0, 0, 0, 6, 0x0a, 0x04, b't', b'r', b'u', b'e'];
    let resp = http
        .post(format!(
            "http://{}/ateenv.v1alpha.ProcessService/StartProcess",
            emu.endpoint()
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("ate-target-actor", super::PRIMARY_ACTOR)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/grpc");
    let b = resp.bytes().await.unwrap();
    assert_eq!(b[0], 0, "not compressed");
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    let m = &b[5..];
    assert_eq!(m.len(), len);
    assert_eq!(&m[..2], &[0x0a, 29], "field 1, a 29-byte process id");
    let id = std::str::from_utf8(&m[2..31]).unwrap();
    assert!(
        id.starts_with("proc-") && id[5..].bytes().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(
        &m[31..37],
        &[0x12, 0x04, b't', b'r', b'u', b'e'],
        "field 2: command"
    );
    assert_eq!(m[37], 0x18, "field 3: pid (varint)");
    let mut i = 38;
    while m[i] & 0x80 != 0 {
        i += 1;
    }
    assert_eq!(m[i + 1], 0x20, "field 4: state");
    assert!(matches!(m[i + 2], 1 | 2), "RUNNING or EXITED");
    // /healthz and /readyz share the port, as on AX's runner.
    let ok = http
        .get(format!("http://{}/readyz", emu.endpoint()))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_and_empty_ids_are_the_guests_codes() {
    let (_emu, ch) = emulator().await;
    let mut c = ProcessServiceClient::new(ch);
    let e = c
        .get_process(GetProcessRequest {
            process_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "process \"nope\" not found")
    );
    let e = c
        .get_process(GetProcessRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "process_id cannot be empty")
    );
    let e = c.start_process(start(&[])).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "command cannot be empty")
    );
    let p = c
        .start_process(start(&["true"]))
        .await
        .unwrap()
        .into_inner();
    let e = c
        .stream_process_output(StreamProcessOutputRequest {
            process_id: p.process_id.clone(),
            stdout_offset: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "offsets cannot be negative")
    );
    let e = c
        .write_process_input(futures_iter(vec![WriteProcessInputRequest {
            process_id: p.process_id.clone(),
            data: Bytes::from_static(b"x"),
            close: false,
        }]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().ends_with("was started without stdin"), "{e:?}");
    let _ = collect(&mut c, &p.process_id, (0, 0), true).await;
    let e = c
        .signal_process(SignalProcessRequest {
            process_id: p.process_id.clone(),
            signal: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = c
        .signal_process(SignalProcessRequest {
            process_id: p.process_id.clone(),
            signal: 16,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "unsupported signal 16")
    );
    let e = c
        .start_process(start(&["no-such-program"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert_eq!(
        e.message(),
        "starting process: exec: \"no-such-program\": executable file not found in $PATH"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn offsets_address_the_spools() {
    let (_emu, ch) = emulator().await;
    let mut c = ProcessServiceClient::new(ch);
    let p = c
        .start_process(start(&[
            "sh",
            "-c",
            "printf abcdef; printf XYZ >&2; exit 4",
        ]))
        .await
        .unwrap()
        .into_inner();
    let all = collect(&mut c, &p.process_id, (0, 0), true).await;
    assert_eq!(all, (b"abcdef".to_vec(), b"XYZ".to_vec(), Some(4)));
    let tail = collect(&mut c, &p.process_id, (3, 2), true).await;
    assert_eq!(tail, (b"def".to_vec(), b"Z".to_vec(), Some(4)));
    let past = collect(&mut c, &p.process_id, (100, 100), false).await;
    assert_eq!(
        past,
        (vec![], vec![], Some(4)),
        "past the end: nothing, then the exit"
    );
    // follow=false on a running process: what is there, and no exit message.
    let p = c
        .start_process(start(&["sh", "-c", "printf now; sleep 5"]))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = collect(&mut c, &p.process_id, (0, 0), false).await;
    assert_eq!(now, (b"now".to_vec(), vec![], None));
    let sig = c
        .signal_process(SignalProcessRequest {
            process_id: p.process_id.clone(),
            signal: 9,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(sig.process_id, p.process_id);
    let end = collect(&mut c, &p.process_id, (3, 0), true).await;
    assert_eq!(end.2, Some(137), "128 + SIGKILL");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_most_ten_processes_run_at_once() {
    let (emu, ch) = emulator().await;
    let mut c = ProcessServiceClient::new(ch);
    for _ in 0..10 {
        c.start_process(start(&["sleep", "30"])).await.unwrap();
    }
    let e = c.start_process(start(&["true"])).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(
        e.message()
            .starts_with("maximum concurrent processes limit reached (10)")
    );
    assert_eq!(emu.primary().running(), 10);
    let p = emu.primary().clone();
    p.vanish();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while p.running() > 0 {
        assert!(
            std::time::Instant::now() < until,
            "vanishing kills every process"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e = c.start_process(start(&["true"])).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "the direct guest is gone");
}

#[tokio::test(flavor = "multi_thread")]
async fn files_follow_the_guest() {
    let (emu, ch) = emulator().await;
    let mut f = FileSystemServiceClient::new(ch);
    let e = f
        .write_file(futures_iter(Vec::<WriteFileRequest>::new()))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "no file data received")
    );
    let w = |path: &str, seek: i64, data: &'static [u8]| WriteFileRequest {
        path: path.into(),
        mode: 0,
        seek_offset: seek,
        chunk: Bytes::from_static(data),
    };
    f.write_file(futures_iter(vec![w("a/b.txt", 0, b"hello")]))
        .await
        .unwrap();
    f.write_file(futures_iter(vec![w("a/b.txt", 1, b"EY")]))
        .await
        .unwrap();
    let host = emu.primary().sandbox().host_path("/workspace/a/b.txt");
    assert_eq!(std::fs::read(&host).unwrap(), b"hEYlo");
    let mut r = f
        .read_file(ReadFileRequest {
            path: "/workspace/new/empty".into(),
            mode: 0o600,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        r.message().await.unwrap().is_none(),
        "created empty, no chunks"
    );
    assert!(
        emu.primary()
            .sandbox()
            .host_path("/workspace/new/empty")
            .exists()
    );
    let e = f
        .read_file(ReadFileRequest {
            path: "/workspace/../etc/passwd".into(),
            mode: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = f
        .read_file(ReadFileRequest {
            path: String::new(),
            mode: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "file path cannot be empty")
    );
}

fn futures_iter<T: Send + 'static>(items: Vec<T>) -> impl futures_core::Stream<Item = T> + Send {
    struct Iter<T>(std::vec::IntoIter<T>);
    impl<T> Unpin for Iter<T> {}
    impl<T> futures_core::Stream for Iter<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    Iter(items.into_iter())
}

/// A guest that vanishes reports no exit for the processes that died with it (the kill in
/// `vanish` records 137): a stream its reset did not reach, here one with no connection to
/// reset (under load the reset can land after the exit was sent: conformance
/// `fault-sandbox-vanishes` once read exit 137), ends with an error, never with an exit.
#[tokio::test]
async fn a_vanished_guest_reports_no_exit() {
    let (emu, _channel) = emulator().await;
    let guest = emu.shared.primary.clone();
    let proc = guest
        .tracker
        .start(super::tracker::StartOptions {
            command: vec!["sleep".into(), "30".into()],
            cwd: String::new(),
            env: Default::default(),
            stdin: false,
            timeout: Duration::ZERO,
        })
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let follower = tokio::spawn(super::follow(
        guest.clone(),
        proc,
        [0, 0],
        true,
        tx,
        None,
        None,
    ));
    guest.vanish();
    let mut answers = Vec::new();
    while let Some(m) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the stream ends")
    {
        answers.push(m);
    }
    follower.await.unwrap();
    assert!(
        answers.iter().all(|m| !matches!(
            m,
            Ok(execseam_ax_proto::ProcessOutput {
                output: Some(Output::Exit(_))
            })
        )),
        "{answers:?}"
    );
    assert!(
        matches!(answers.last(), Some(Err(s)) if s.code() == Code::Unavailable),
        "{answers:?}"
    );
}
