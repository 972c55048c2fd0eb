//! Interop: the official `e2b` Python SDK (pinned in `interop/e2b/requirements.txt`) against the
//! E2B emulator: the exec and files surface end to end, then one command under each fault the SDK
//! maps to its own exception. Fails loudly when PyPI cannot be reached.

use std::path::{Path, PathBuf};
use std::time::Duration;

use execseam_emulator_e2b::{E2bEmulator, StreamFault};
use execseam_emulator_kit::{EmulatorOptions, Fault};
use execseam_test_util::interop;

/// Checks `e2b_interop.py main` makes; the run must report exactly this many.
const MAIN_CHECKS: usize = 120;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

async fn python() -> PathBuf {
    tokio::task::spawn_blocking(|| {
        interop::python_env("e2b", &dir().join("requirements.txt"))
            .expect("the official e2b SDK installs from PyPI")
    })
    .await
    .unwrap()
}

async fn run(python: &Path, env: Vec<(String, String)>, args: &[&str]) -> (bool, String) {
    let python = python.to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&python)
            .arg(dir().join("e2b_interop.py"))
            .args(&args)
            .envs(env)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("python runs");
        let text = format!(
            "{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_runs_commands_and_files_against_the_emulator() {
    let python = python().await;
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let (ok, out) = run(&python, emu.env(), &["main"]).await;
    assert!(ok, "the SDK run failed:\n{out}");
    assert!(
        out.contains(&format!("ALL CHECKS PASSED {MAIN_CHECKS}")),
        "not every check ran:\n{out}"
    );
    let checks = out.lines().filter(|l| l.starts_with("CHECK ")).count();
    assert_eq!(checks, MAIN_CHECKS, "{out}");
    // What the SDK sent: the v2 create, Connect streams with its keepalive header.
    let reqs = emu.requests();
    assert!(
        reqs.iter()
            .any(|r| r.path == "/v2/sandboxes" && r.method == "POST")
    );
    let start = reqs
        .iter()
        .find(|r| r.path == "/process.Process/Start")
        .expect("a Start");
    assert_eq!(start.headers["content-type"], "application/connect+json");
    assert_eq!(start.headers["keepalive-ping-interval"], "50");
    assert_eq!(start.headers["connect-timeout-ms"], "60000");
    assert!(
        reqs.iter()
            .any(|r| r.path == "/process.Process/StreamInput")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/filesystem.Filesystem/ListDir")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/files" && r.method == "POST")
    );
    // The async SDK's `files.watch_dir`: one `WatchDir` server stream, not the polling calls
    // (`e2b/sandbox_async/filesystem/filesystem.py`).
    let watch = reqs
        .iter()
        .find(|r| r.path == "/filesystem.Filesystem/WatchDir")
        .expect("a WatchDir");
    assert_eq!(watch.headers["content-type"], "application/connect+json");
    assert_eq!(watch.headers["connect-timeout-ms"], "60000");
    // `files.write(gzip=True)` and `files.write(metadata=)` as the SDK sends them.
    assert!(reqs.iter().any(|r| r.path == "/files"
        && r.headers.get("content-encoding").map(String::as_str) == Some("gzip")));
    assert!(reqs.iter().any(|r| r.path == "/files"
        && r.headers.get("x-metadata-owner").map(String::as_str) == Some("alice")));
    eprintln!("{out}");
}

/// Checks `e2b_interop.py state` makes.
const STATE_CHECKS: usize = 36;

/// Pause (full and filesystem-only) and resume, snapshot templates, create from one, list and
/// delete them, fork, and a port reached by `get_host`: what E2B's API answers
/// (`e2b-dev/infra` `packages/api/internal/handlers`), through the official SDK.
#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_pauses_snapshots_forks_and_reaches_a_port() {
    let python = python().await;
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let (ok, out) = run(&python, emu.env(), &["state"]).await;
    assert!(ok, "the SDK run failed:\n{out}");
    let checks = out.lines().filter(|l| l.starts_with("CHECK ")).count();
    assert!(
        out.contains(&format!("ALL CHECKS PASSED {STATE_CHECKS}")) && checks == STATE_CHECKS,
        "not every check ran ({checks}):\n{out}"
    );
    // What the SDK sent: the pause body it sends for mode="filesystem", the fork's count.
    let reqs = emu.requests();
    assert!(reqs.iter().any(|r| r.path.ends_with("/pause")));
    assert!(
        reqs.iter()
            .any(|r| r.path.ends_with("/fork") && r.method == "POST")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/snapshots" && r.method == "GET")
    );
    assert!(emu.sandbox_ids().is_empty(), "{:?}", emu.sandbox_ids());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_maps_the_emulators_faults_to_its_exceptions() {
    let python = python().await;
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    type Arm = Box<dyn Fn(&E2bEmulator)>;
    let cases: Vec<(&str, &str, Arm)> = vec![
        (
            "rate-limited",
            "RateLimitException",
            Box::new(|e| {
                e.faults().arm(
                    "exec",
                    Fault::RateLimited {
                        retry_after_secs: 1,
                    },
                )
            }),
        ),
        (
            "auth",
            "AuthenticationException",
            Box::new(|e| e.faults().arm("exec", Fault::AuthFailure)),
        ),
        (
            "stream-error",
            "SandboxException",
            Box::new(|e| {
                e.arm_stream_fault(StreamFault::Error {
                    code: "internal",
                    message: "boom".into(),
                })
            }),
        ),
        (
            "deadline",
            "TimeoutException",
            Box::new(|e| {
                e.arm_stream_fault(StreamFault::Error {
                    code: "deadline_exceeded",
                    message: "context deadline exceeded".into(),
                })
            }),
        ),
        (
            "no-end-event",
            "Exception",
            Box::new(|e| e.arm_stream_fault(StreamFault::NoEndEvent)),
        ),
        // Last: the sandbox is gone afterwards.
        (
            "vanish",
            "SandboxNotRunningException",
            Box::new(|e| e.faults().arm("exec", Fault::SandboxVanishes)),
        ),
    ];
    let sbx = emu.create_sandbox(Duration::from_secs(600)).unwrap();
    for (kind, class, arm) in cases {
        arm(&emu);
        let (ok, out) = run(&python, emu.env(), &["fault", kind, &sbx.sandbox_id]).await;
        assert!(ok, "{kind}:\n{out}");
        assert!(
            out.contains(&format!("FAULT {kind} {class} ")),
            "{kind}: want {class}:\n{out}"
        );
        emu.faults().clear();
    }
}

/// The bytes of a `process.Start` stream, checked against the research capture: envelopes, the
/// start/data/keepalive/end events in proto3 JSON with defaults omitted, and the end-stream
/// envelope `02 00 00 00 02 {}`.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_stream_is_envds_on_the_wire() {
    let (emu, sbx, http) = one_sandbox().await;
    let start = |body: &str, keepalive: &str| {
        envd_call(&http, &emu, &sbx, "Start", "application/connect+json")
            .header("keepalive-ping-interval", keepalive)
            .body(envelope(body))
    };
    let resp = start(
        r#"{"process":{"cmd":"/bin/sh","args":["-c","sleep 1.5; printf hi"]},"stdin":false}"#,
        "1",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/connect+json");
    let body = resp.bytes().await.unwrap();
    let mut frames = Vec::new();
    let mut rest = &body[..];
    while !rest.is_empty() {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        frames.push((
            rest[0],
            String::from_utf8(rest[5..5 + len].to_vec()).unwrap(),
        ));
        rest = &rest[5 + len..];
    }
    let (flags, first) = &frames[0];
    assert_eq!(*flags, 0);
    assert!(first.starts_with(r#"{"event":{"start":{"pid":"#), "{first}");
    assert!(
        frames.contains(&(0, r#"{"event":{"keepalive":{}}}"#.to_owned())),
        "a keepalive after a second without output: {frames:?}"
    );
    assert!(frames.contains(&(0, r#"{"event":{"data":{"stdout":"aGk="}}}"#.to_owned())));
    let n = frames.len();
    assert_eq!(
        frames[n - 2],
        (
            0,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#.to_owned()
        )
    );
    assert_eq!(frames[n - 1], (2, "{}".to_owned()));

    // A missing cwd: HTTP 200 and only the end-stream error.
    let resp = start(
        r#"{"process":{"cmd":"true","cwd":"/home/user/nope"},"stdin":false}"#,
        "50",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.unwrap();
    assert_eq!(body[0], 2);
    assert_eq!(
        &body[5..],
        br#"{"error":{"code":"invalid_argument","message":"cwd '/home/user/nope' does not exist"}}"#
    );

    // A unary error: mapped status and the Connect error body.
    let resp = http
        .post(format!("{}/filesystem.Filesystem/Stat", emu.base_url()))
        .header("content-type", "application/json")
        .header("e2b-sandbox-id", &sbx.sandbox_id)
        .header("e2b-sandbox-port", "49983")
        .header("x-access-token", &sbx.envd_access_token)
        .body(r#"{"path":"/nope"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "not_found");

    // Without the access token: envd's plain 401; an unknown sandbox: the proxy's 502.
    let resp = http
        .post(format!("{}/filesystem.Filesystem/Stat", emu.base_url()))
        .header("content-type", "application/json")
        .header("e2b-sandbox-id", &sbx.sandbox_id)
        .header("e2b-sandbox-port", "49983")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = http
        .get(format!("{}/health", emu.base_url()))
        .header("e2b-sandbox-id", "igone")
        .header("e2b-sandbox-port", "49983")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["message"], "The sandbox was not found");
}

/// Keep-alive after an early answer: a request to a killed sandbox carrying a large body, then a
/// request to a healthy one on the same connection. The proxy's 502 must come after the body
/// is read, or the server closes the connection under the client's pooled second request (the
/// SDK then fails a healthy call with `SandboxUnreachableException`, `e2b/envd/api.py`).
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_to_a_killed_sandbox_keeps_the_connection_usable() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let dead = emu.create_sandbox(Duration::from_secs(60)).unwrap();
    let live = emu.create_sandbox(Duration::from_secs(60)).unwrap();
    assert!(emu.kill_sandbox(&dead.sandbox_id));
    let addr = emu.base_url().trim_start_matches("http://").to_owned();
    for round in 0..3 {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let body = vec![b'x'; 8 << 20];
        let mut wire = format!(
            "POST /files?path=/home/user/x HTTP/1.1\r\nHost: {addr}\r\ne2b-sandbox-id: {}\r\n\
             e2b-sandbox-port: 49983\r\nx-access-token: {}\r\ncontent-type: application/octet-stream\r\n\
             content-length: {}\r\n\r\n",
            dead.sandbox_id,
            dead.envd_access_token,
            body.len()
        )
        .into_bytes();
        wire.extend_from_slice(&body);
        wire.extend_from_slice(
            format!(
                "GET /health HTTP/1.1\r\nHost: {addr}\r\ne2b-sandbox-id: {}\r\n\
                 e2b-sandbox-port: 49983\r\n\r\n",
                live.sandbox_id
            )
            .as_bytes(),
        );
        let (mut rd, mut wr) = conn.split();
        let (write, read) = tokio::join!(wr.write_all(&wire), async {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while got
                .windows(12)
                .filter(|w| w.starts_with(b"HTTP/1.1 "))
                .count()
                < 2
            {
                match tokio::time::timeout(Duration::from_secs(10), rd.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                }
            }
            String::from_utf8_lossy(&got).into_owned()
        });
        assert!(
            write.is_ok(),
            "round {round}: the server stopped reading: {write:?}"
        );
        assert!(read.starts_with("HTTP/1.1 502"), "round {round}: {read}");
        assert!(
            read.contains("HTTP/1.1 204"),
            "round {round}: the healthy request got no answer on the kept-alive connection:\n{read}"
        );
    }
}

/// Checks `e2b_interop.py pty` makes.
const PTY_CHECKS: usize = 19;

/// `sandbox.pty.*` through the official SDK: envd's PTY process mode on a real terminal of the
/// sandbox (see `pty()` in `e2b_interop.py` for the sources each check follows).
#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_drives_a_pty() {
    let python = python().await;
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let (ok, out) = run(&python, emu.env(), &["pty"]).await;
    assert!(ok, "the SDK run failed:\n{out}");
    assert!(
        out.contains(&format!("ALL CHECKS PASSED {PTY_CHECKS}")),
        "not every check ran:\n{out}"
    );
    let checks = out.lines().filter(|l| l.starts_with("CHECK ")).count();
    assert_eq!(checks, PTY_CHECKS, "{out}");
    // The SDK's Start: a `pty` with the size, `/bin/bash -i -l`.
    let reqs = emu.requests();
    assert!(reqs.iter().any(|r| r.path == "/process.Process/Update"));
    assert!(reqs.iter().any(|r| r.path == "/process.Process/SendSignal"));
    eprintln!("{out}");
}

/// An emulator with one sandbox, and a client.
async fn one_sandbox() -> (
    E2bEmulator,
    execseam_emulator_e2b::SandboxCreated,
    reqwest::Client,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let sbx = emu.create_sandbox(Duration::from_secs(60)).unwrap();
    (emu, sbx, reqwest::Client::new())
}

/// A `process.Process` call to the sandbox's envd through the emulator's proxy.
fn envd_call(
    http: &reqwest::Client,
    emu: &E2bEmulator,
    sbx: &execseam_emulator_e2b::SandboxCreated,
    method: &str,
    content_type: &str,
) -> reqwest::RequestBuilder {
    http.post(format!("{}/process.Process/{method}", emu.base_url()))
        .header("content-type", content_type)
        .header("connect-protocol-version", "1")
        .header("e2b-sandbox-id", &sbx.sandbox_id)
        .header("e2b-sandbox-port", "49983")
        .header("x-access-token", &sbx.envd_access_token)
}

/// One Connect envelope of a JSON message.
fn envelope(json: &str) -> bytes::Bytes {
    let mut wire = vec![0u8];
    wire.extend_from_slice(&(json.len() as u32).to_be_bytes());
    wire.extend_from_slice(json.as_bytes());
    wire.into()
}

/// A server stream's messages as they arrive.
struct Messages {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Messages {
    async fn next(&mut self) -> Option<(u8, serde_json::Value)> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() >= 5 + len {
                    let flags = self.buf[0];
                    let v = serde_json::from_slice(&self.buf[5..5 + len]).unwrap();
                    self.buf.drain(..5 + len);
                    return Some((flags, v));
                }
            }
            let chunk = self.resp.chunk().await.unwrap()?;
            self.buf.extend_from_slice(&chunk);
        }
    }

    /// The process's stdout until `until` has come (or the stream ended).
    async fn stdout_until(&mut self, until: &str) -> String {
        use base64::Engine as _;
        let mut out = Vec::new();
        while !String::from_utf8_lossy(&out).contains(until) {
            let Some((_, v)) = self.next().await else {
                break;
            };
            if let Some(s) = v["event"]["data"]["stdout"].as_str() {
                out.extend(base64::engine::general_purpose::STANDARD.decode(s).unwrap());
            }
        }
        String::from_utf8(out).unwrap()
    }
}

/// D5 (issue 38): `StreamInput` reaches the process as its messages arrive, as envd's handler
/// does (`e2b-dev/infra` `packages/envd/internal/services/process/input.go`:
/// `for stream.Receive()`, each `data` written to stdin before the next message is read; no read
/// limit is set, `service.go`), so the emulator holds one message, not the stream: the process
/// echoes the first input while the stream is still open, then counts 10 MiB more. The emulator
/// before read the whole body first (and bounded it at 128 MiB): the echo never came.
#[tokio::test(flavor = "multi_thread")]
async fn stream_input_reaches_the_process_as_it_arrives() {
    use base64::Engine as _;
    let (emu, sbx, http) = one_sandbox().await;
    let envd =
        |method: &str, content_type: &str| envd_call(&http, &emu, &sbx, method, content_type);
    const STREAM: &str = "application/connect+json";
    let resp = envd("Start", STREAM)
        .body(envelope(
            r#"{"process":{"cmd":"/bin/sh","args":["-c","head -c 5; wc -c"]},"stdin":true}"#,
        ))
        .send()
        .await
        .unwrap();
    let mut started = Messages {
        resp,
        buf: Vec::new(),
    };
    let (_, first) = started.next().await.unwrap();
    let pid = first["event"]["start"]["pid"]
        .as_u64()
        .expect("a start event");
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
    let body = reqwest::Body::wrap_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
    }));
    let input = tokio::spawn(envd("StreamInput", STREAM).body(body).send());
    let data = |bytes: &[u8]| {
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        envelope(&format!(r#"{{"data":{{"input":{{"stdin":"{b64}"}}}}}}"#))
    };
    tx.send(envelope(&format!(
        r#"{{"start":{{"process":{{"pid":{pid}}}}}}}"#
    )))
    .await
    .unwrap();
    tx.send(data(b"hello")).await.unwrap();
    let echo = tokio::time::timeout(Duration::from_secs(10), started.stdout_until("hello"))
        .await
        .expect("the first input reaches the process while the stream is open");
    assert_eq!(echo, "hello");
    let message = data(&[b'x'; 64 << 10]);
    for _ in 0..160 {
        tx.send(message.clone()).await.unwrap();
    }
    drop(tx);
    let resp = input.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.bytes()
            .await
            .unwrap()
            .ends_with(&[2, 0, 0, 0, 2, b'{', b'}'])
    );
    let closed = envd("CloseStdin", "application/json")
        .body(format!(r#"{{"process":{{"pid":{pid}}}}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 200);
    let count = started.stdout_until("\n").await;
    assert_eq!(count.trim(), (160 * (64 << 10)).to_string());
}
