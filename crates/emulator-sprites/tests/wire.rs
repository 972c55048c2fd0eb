//! The Sprites emulator's bytes on the wire, against the test vectors of the research notes
//! (`../shared/research/fly-sprites.md` §B.10), which follow sprites-go `websocket.go`,
//! sprites-py `websocket.py` and the 2025 server's `pkg/runner/multiplexer.go` and
//! `server/api/exec_http.go`.

use std::time::{Duration, Instant};

use execseam_emulator_kit::EmulatorOptions;
use execseam_emulator_sprites::{DEFAULT_SPRITE, SignalExit, SpritesEmulator, SpritesOptions};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn emulator(opts: SpritesOptions) -> SpritesEmulator {
    let _ = rustls::crypto::ring::default_provider().install_default();
    SpritesEmulator::start_with(EmulatorOptions::with_token("tok"), opts)
        .await
        .expect("the emulator starts")
}

async fn connect(
    emu: &SpritesEmulator,
    query: &str,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let url = format!(
        "{}/v1/sprites/{DEFAULT_SPRITE}/exec?{query}",
        emu.base_url().replacen("http", "ws", 1)
    );
    tokio_tungstenite::connect_async(ws_request(url))
        .await
        .map(|(ws, _)| ws)
}

/// An exec WebSocket with `query` that must open.
async fn open(emu: &SpritesEmulator, query: &str) -> Ws {
    connect(emu, query).await.expect("the upgrade")
}

/// Sends `r` with the token.
async fn send(r: reqwest::RequestBuilder) -> reqwest::Response {
    r.header("authorization", "Bearer tok")
        .send()
        .await
        .expect("a response")
}

/// Sends `r` with the token; the answer's JSON body.
async fn json_of(r: reqwest::RequestBuilder) -> Value {
    send(r).await.json().await.expect("a JSON body")
}

/// A WebSocket request to `url` with the token.
fn ws_request(url: String) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer tok".parse().unwrap());
    req
}

/// Reads messages until the exit frame (inclusive); text messages are returned as JSON.
async fn frames(ws: &mut Ws) -> (Vec<Value>, Vec<Vec<u8>>) {
    let (mut text, mut bin) = (Vec::new(), Vec::new());
    while let Some(m) = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a frame within 10 s")
    {
        match m.expect("a message") {
            Message::Text(t) => text.push(serde_json::from_str(t.as_str()).unwrap()),
            Message::Binary(b) => {
                let exit = b.first() == Some(&3);
                bin.push(b.to_vec());
                if exit {
                    break;
                }
            }
            _ => {}
        }
    }
    (text, bin)
}

#[tokio::test(flavor = "multi_thread")]
async fn websocket_frames_match_the_test_vectors() {
    let emu = emulator(SpritesOptions::default()).await;

    // `echo hello` → text session_info; `01 68 65 6c 6c 6f 0a`; `03 00`.
    let mut ws = open(&emu, "cmd=echo&cmd=hello&path=echo").await;
    let (text, bin) = frames(&mut ws).await;
    assert_eq!(text.len(), 1);
    assert_eq!(text[0]["type"], "session_info");
    assert!(
        text[0]["session_id"].is_u64(),
        "an integer, as documented: {}",
        text[0]
    );
    assert_eq!(text[0]["is_owner"], true);
    assert_eq!(text[0]["tty"], false);
    assert_eq!(bin, [b"\x01hello\n".to_vec(), vec![3, 0]]);
    ws.close(None).await.unwrap();

    // `sh -c 'echo err 1>&2; exit 3'` → `02 65 72 72 0a`, `03 03`.
    let mut ws = open(&emu, "cmd=sh&cmd=-c&cmd=echo+err+1%3E%262%3B+exit+3").await;
    assert_eq!(frames(&mut ws).await.1, [b"\x02err\n".to_vec(), vec![3, 3]]);

    // `cat` with stdin=true: `00 61 62 63`, `04` → `01 61 62 63`, `03 00`.
    let mut ws = open(&emu, "cmd=cat&stdin=true").await;
    ws.send(Message::Binary(b"\x00abc".to_vec().into()))
        .await
        .unwrap();
    ws.send(Message::Binary(vec![4].into())).await.unwrap();
    assert_eq!(frames(&mut ws).await.1, [b"\x01abc".to_vec(), vec![3, 0]]);

    // The same with stdin=false: the frames are ignored, cat sees EOF at once → `03 00` only.
    let mut ws = open(&emu, "cmd=cat&stdin=false").await;
    ws.send(Message::Binary(b"\x00abc".to_vec().into()))
        .await
        .unwrap();
    assert_eq!(frames(&mut ws).await.1, [vec![3, 0]]);

    // No command → `400 No command specified` before the upgrade.
    match connect(&emu, "dir=/").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 400);
            let body =
                String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("No command specified"), "{body}");
        }
        other => panic!("want a 400, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signal_death_is_128_plus_n_or_255_in_raw_mode() {
    let emu = emulator(SpritesOptions::default()).await;
    let mut ws = open(&emu, "cmd=sh&cmd=-c&cmd=kill+-9+%24%24").await;
    assert_eq!(frames(&mut ws).await.1, [vec![3, 137]]);
    emu.set_options(|o| o.signal_exit = SignalExit::Raw255);
    let mut ws = open(&emu, "cmd=sh&cmd=-c&cmd=kill+-9+%24%24").await;
    assert_eq!(frames(&mut ws).await.1, [vec![3, 0xff]]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_lingers_after_the_exit_then_closes_with_1000() {
    let emu = emulator(SpritesOptions {
        linger: Duration::from_millis(600),
        ..SpritesOptions::default()
    })
    .await;
    let mut ws = open(&emu, "cmd=true").await;
    assert_eq!(frames(&mut ws).await.1, [vec![3, 0]]);
    let t = Instant::now();
    match tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
    {
        Some(Ok(Message::Close(Some(f)))) => assert_eq!(f.code, CloseCode::Normal),
        other => panic!("want a close frame, got {other:?}"),
    }
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "closed after {:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_cannot_start_drops_the_socket_without_an_exit() {
    let emu = emulator(SpritesOptions::default()).await;
    let mut ws = open(&emu, "cmd=true&dir=%2Fno%2Fsuch%2Fdir").await;
    let mut got = Vec::new();
    while let Some(m) = ws.next().await {
        match m {
            Ok(m) => got.push(m),
            Err(_) => break,
        }
    }
    assert!(
        got.iter()
            .all(|m| !matches!(m, Message::Binary(b) if b.first() == Some(&3))),
        "no exit frame: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn http_post_exec_bodies() {
    let emu = emulator(SpritesOptions::default()).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/sprites/{DEFAULT_SPRITE}/exec", emu.base_url());
    let post = |q: &'static str, body: &'static [u8]| {
        send(
            http.post(format!("{url}?{q}"))
                .header("content-type", "application/octet-stream")
                .body(body),
        )
    };

    // `cmd=echo&cmd=hello` → `01 68 65 6c 6c 6f 0a 03 00`, application/octet-stream, nosniff.
    let r = post("cmd=echo&cmd=hello", b"").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"\x01hello\n\x03\x00");

    // stdin from the body only with stdin=true.
    let r = post("cmd=cat&stdin=true", b"piped").await;
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"\x01piped\x03\x00");
    let r = post("cmd=cat", b"ignored").await;
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"\x03\x00");

    // The status is 200 whatever the command's exit; the code is in the last frame.
    let r = post("cmd=sh&cmd=-c&cmd=exit+9", b"").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"\x03\x09");

    for (q, want) in [
        ("cmd=true&tty=true", "TTY not supported on POST /exec"),
        ("cmd=true&id=12", "Unsupported parameters for POST /exec"),
        (
            "cmd=true&detachable=true",
            "Unsupported parameters for POST /exec",
        ),
    ] {
        let r = post(q, b"").await;
        assert_eq!(r.status(), 400, "{q}");
        assert_eq!(r.text().await.unwrap().trim(), want);
    }
    let r = post("cmd=true&dir=%2Fno%2Fsuch", b"").await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.text().await.unwrap().trim(), "failed to start process");

    // Errors seen in real captures.
    let r = http
        .post(&url)
        .header("authorization", "Bearer nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"error":"authentication failed"}"#
    );
    let r = send(http.get(format!("{}/v1/sprites/ghost", emu.base_url()))).await;
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"error":"failed to retrieve sprite"}"#
    );
    let r = send(http.get(format!(
        "{}/v1/sprites/{DEFAULT_SPRITE}/control",
        emu.base_url()
    )))
    .await;
    assert_eq!(
        r.status(),
        404,
        "/control is not emulated: SDKs fall back to direct WebSockets"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_can_be_listed_attached_and_killed() {
    let emu = emulator(SpritesOptions::default()).await;
    let mut owner = open(&emu, "cmd=sh&cmd=-c&cmd=echo+first%3B+sleep+30").await;
    let info = match owner.next().await.unwrap().unwrap() {
        Message::Text(t) => serde_json::from_str::<Value>(t.as_str()).unwrap(),
        other => panic!("{other:?}"),
    };
    let id = info["session_id"].as_u64().unwrap();
    assert_eq!(
        owner.next().await.unwrap().unwrap(),
        Message::Binary(b"\x01first\n".to_vec().into())
    );

    let http = reqwest::Client::new();
    let base = format!("{}/v1/sprites/{DEFAULT_SPRITE}", emu.base_url());
    let list: Value = json_of(http.get(format!("{base}/exec"))).await;
    assert_eq!(list["count"], 1);
    let s = &list["sessions"][0];
    assert_eq!(s["id"], id.to_string());
    assert_eq!(s["command"], "sh -c echo first; sleep 30");
    assert_eq!(s["workdir"], "/home/sprite");
    assert_eq!(s["is_active"], true);
    assert_eq!(s["tty"], false);

    // Attach: session_info (not the owner), the replayed output, then live.
    let url = format!("{}/exec/{id}", base.replacen("http", "ws", 1));
    let (mut attached, _) = tokio_tungstenite::connect_async(ws_request(url))
        .await
        .unwrap();
    match attached.next().await.unwrap().unwrap() {
        Message::Text(t) => {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            assert_eq!(
                (v["type"].as_str(), v["is_owner"].as_bool()),
                (Some("session_info"), Some(false))
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        attached.next().await.unwrap().unwrap(),
        Message::Binary(b"\x01first\n".to_vec().into())
    );

    // Kill: NDJSON signal → killed → complete; both clients get the exit; then 410.
    let r = send(
        http.post(format!("{base}/exec/{id}/kill"))
            .json(&serde_json::json!({"signal": "SIGTERM", "timeout": 10})),
    )
    .await;
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let body = r.text().await.unwrap();
    let types: Vec<String> = body
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(types, ["signal", "killed", "complete"], "{body}");
    assert_eq!(frames(&mut owner).await.1.last().unwrap(), &vec![3, 137]);
    assert_eq!(frames(&mut attached).await.1.last().unwrap(), &vec![3, 137]);
    let r = send(http.post(format!("{base}/exec/{id}/kill?signal=TERM&timeout=0s"))).await;
    assert_eq!(r.status(), 410, "an exited session is gone");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disconnected_command_runs_on_for_max_run_after_disconnect() {
    let emu = emulator(SpritesOptions::default()).await;
    let sprite = emu.sprite(DEFAULT_SPRITE).unwrap();
    let ws = open(&emu, "cmd=sleep&cmd=30&max_run_after_disconnect=1s").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sprite.sessions().len(), 1);
    drop(ws);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        sprite.sessions().len(),
        1,
        "still running just after the disconnect"
    );
    let t = Instant::now();
    while !sprite.sessions().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "killed after max_run_after_disconnect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tty_mode_has_raw_frames_and_a_text_exit() {
    // A real PTY (the harness's `spawn_pty`): stdout and stderr arrive merged as raw binary
    // frames, stdin frames are typed into the terminal (canonical mode: `head` reads the line
    // once its newline arrives, and the terminal echoes it with ONLCR's `\r\n`), the exit is the
    // text message, then a close.
    let emu = emulator(SpritesOptions::default()).await;
    let mut ws = open(&emu, "cmd=head&cmd=-c&cmd=3&tty=true&rows=40&cols=120").await;
    ws.send(Message::Binary(b"abc\n".to_vec().into()))
        .await
        .unwrap();
    let (mut text, mut raw) = (Vec::new(), Vec::new());
    let mut closed = false;
    while let Some(Ok(m)) = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap()
    {
        match m {
            Message::Text(t) => text.push(serde_json::from_str::<Value>(t.as_str()).unwrap()),
            Message::Binary(b) => raw.extend_from_slice(&b),
            Message::Close(_) => {
                closed = true;
                break;
            }
            _ => {}
        }
    }
    assert_eq!(raw, b"abc\r\nabc", "the echo, then head's 3 bytes");
    assert_eq!(text[0]["type"], "session_info");
    assert_eq!(
        (
            text[0]["tty"].as_bool(),
            text[0]["rows"].as_u64(),
            text[0]["cols"].as_u64()
        ),
        (Some(true), Some(40), Some(120))
    );
    assert_eq!(
        text.last().unwrap(),
        &serde_json::json!({"type": "exit", "exit_code": 0})
    );
    assert!(closed, "the server closes after a TTY exit");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_filesystem_api_shares_files_with_commands() {
    let emu = emulator(SpritesOptions::default()).await;
    let http = reqwest::Client::new();
    let base = format!("{}/v1/sprites/{DEFAULT_SPRITE}/fs", emu.base_url());

    // `mkdir` (the docs' name) as well as `mkdirParents` (the SDKs'); relative to workingDir.
    let r = send(
        http.put(format!(
            "{base}/write?path=a%2Fb.txt&workingDir=%2Fhome%2Fsprite&mode=0640&mkdir=true"
        ))
        .body("data"),
    )
    .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        serde_json::json!({"path": "/home/sprite/a/b.txt", "size": 4, "mode": "0640"})
    );

    // Listing a file returns that file (the SDKs' stat); a directory, its children.
    let list = |path: &'static str| http.get(format!("{base}/list?path={path}&workingDir=%2F"));
    let v = json_of(list("%2Fhome%2Fsprite%2Fa%2Fb.txt")).await;
    assert_eq!(v["count"], 1);
    let e = &v["entries"][0];
    assert_eq!(
        (
            e["name"].as_str(),
            e["type"].as_str(),
            e["size"].as_u64(),
            e["mode"].as_str(),
            e["isDir"].as_bool()
        ),
        (
            Some("b.txt"),
            Some("file"),
            Some(4),
            Some("0640"),
            Some(false)
        )
    );
    assert!(e["modTime"].as_str().unwrap().ends_with('Z'));
    let v = json_of(list("%2Fhome%2Fsprite%2Fa")).await;
    assert_eq!(v["entries"][0]["path"], "/home/sprite/a/b.txt");
    let r = send(list("%2Fhome%2Fsprite%2Fnope")).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "ENOENT");

    // Copy, chown, then a command sees the result at the same path.
    let post =
        |op: &'static str, body: Value| json_of(http.post(format!("{base}/{op}")).json(&body));
    let v = post(
        "copy",
        serde_json::json!({"source": "a", "dest": "c", "workingDir": "/home/sprite", "recursive": true}),
    )
    .await;
    assert_eq!(v["count"], 1);
    assert_eq!(v["totalBytes"], 4);
    let v = post(
        "chown",
        serde_json::json!({"path": "/home/sprite/c/b.txt", "workingDir": "/", "uid": 1000, "gid": 1000}),
    )
    .await;
    assert_eq!(v["affected"][0]["uid"], 1000);
    let mut ws = open(
        &emu,
        "cmd=stat&cmd=-c&cmd=%25u%3A%25g%3A%25s&cmd=%2Fhome%2Fsprite%2Fc%2Fb.txt",
    )
    .await;
    assert_eq!(
        frames(&mut ws).await.1,
        [b"\x011000:1000:4\n".to_vec(), vec![3, 0]]
    );

    // workingDir is required; delete takes a JSON body too (the docs) and is recursive on demand.
    let r = send(http.get(format!("{base}/read?path=%2Fetc%2Fhostname"))).await;
    assert_eq!(r.status(), 400);
    let r = send(http.delete(format!("{base}/delete")).json(
        &serde_json::json!({"path": "/home/sprite/c", "workingDir": "/", "recursive": false}),
    ))
    .await;
    assert_eq!(r.status(), 400, "a non-empty directory without recursive");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "ENOTEMPTY");
    let v: Value = json_of(http.delete(format!(
        "{base}/delete?path=%2Fhome%2Fsprite%2Fc&workingDir=%2F&recursive=true"
    )))
    .await;
    assert_eq!(
        v["deleted"],
        serde_json::json!(["/home/sprite/c/b.txt", "/home/sprite/c"])
    );
}
