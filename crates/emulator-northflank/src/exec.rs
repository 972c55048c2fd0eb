//! The exec WebSocket: handshake, stdin frames, output frames, the completion.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio_websockets::{CloseCode, Message};

use super::{Entity, ExitCodeJson, State, WORKDIR};
use execseam_emulator_kit::stream::{self, Out, Utf8};
use execseam_emulator_kit::ws::Ws;
use execseam_emulator_kit::{Fault, User};

const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::STANDARD;
/// Output bytes per frame.
const MAX_CHUNK: usize = 32 * 1024;

fn text(v: &Value) -> Message {
    Message::text(v.to_string())
}

fn error_frame(message: &str) -> Message {
    text(&json!({"type": "error", "data": {"message": message}}))
}

async fn close(ws: &mut Ws, code: CloseCode, reason: &str) {
    let _ = ws.send(Message::close(Some(code), reason)).await;
    // Let the client answer the close, then drop the connection.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_close() {
                break;
            }
        }
    })
    .await;
}

/// The next text (or binary) frame, as a JSON object; `Err` is the reason to give up.
async fn next_frame(ws: &mut Ws) -> Result<Option<serde_json::Map<String, Value>>, String> {
    loop {
        match ws.next().await {
            None | Some(Err(_)) => return Ok(None),
            Some(Ok(m)) if m.is_text() || m.is_binary() => return parse(m.as_payload()).map(Some),
            Some(Ok(m)) if m.is_close() => return Ok(None),
            Some(Ok(_)) => {}
        }
    }
}

fn parse(raw: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(format!(
            "Failed to parse message: {}",
            String::from_utf8_lossy(&raw[..raw.len().min(200)])
        )),
    }
}

/// What the init frame's `context` asks for.
struct Context {
    argv: Vec<String>,
    base64: bool,
    tty: bool,
    instance: Option<String>,
    container: Option<String>,
    user: Option<String>,
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

fn context(ctx: &serde_json::Map<String, Value>) -> Result<Context, String> {
    let shell = match ctx.get("shell") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("shell must be a string".into()),
    };
    let command: Option<Vec<String>> = match ctx.get("command") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(vec![s.clone()]),
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or("command must be a string or an array of strings")?,
        ),
        Some(_) => return Err("command must be a string or an array of strings".into()),
    };
    let is_string = matches!(ctx.get("command"), Some(Value::String(_)));
    let argv = match (shell.as_deref(), command) {
        // No shell: an argv as given; a string is split on whitespace (no quoting rules).
        (Some("none"), Some(c)) if is_string => words(&c[0]),
        (Some("none"), Some(c)) => c,
        (Some("none"), None) => return Err("a command is required when shell is \"none\"".into()),
        // A shell: its words, then the command as one string.
        (Some(sh), Some(c)) => {
            let mut argv = words(sh);
            argv.push(c.join(" "));
            argv
        }
        (Some(sh), None) => words(sh),
        // Unset: "several shells are attempted" (docs): bash, else sh.
        (None, Some(c)) => vec![
            "/bin/sh".into(),
            "-c".into(),
            r#"if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; else exec sh -c "$0"; fi"#.into(),
            c.join(" "),
        ],
        (None, None) => vec!["/bin/sh".into(), "-c".into(), "command -v bash >/dev/null 2>&1 && exec bash; exec sh".into()],
    };
    if argv.is_empty() {
        return Err("empty command".into());
    }
    let string = |k: &str| ctx.get(k).and_then(Value::as_str).map(str::to_owned);
    let user = match ctx.get("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => return Err("user must be a string or a number".into()),
    };
    Ok(Context {
        argv,
        base64: ctx.get("encoding").and_then(Value::as_str) == Some("base64"),
        tty: ctx.get("tty").and_then(Value::as_bool).unwrap_or(false),
        instance: string("instanceName"),
        container: string("containerName"),
        user,
    })
}

/// Serves one exec socket.
pub(crate) async fn serve(mut ws: Ws, st: Arc<State>, entity: Arc<Entity>, fault: Option<Fault>) {
    // 1. The init frame, with the token inside.
    let first = match tokio::time::timeout(Duration::from_secs(30), next_frame(&mut ws)).await {
        Ok(Ok(Some(f))) => f,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            let _ = ws.send(error_frame(&e)).await;
            return close(&mut ws, CloseCode::POLICY_VIOLATION, "bad frame").await;
        }
        Err(_) => return close(&mut ws, CloseCode::POLICY_VIOLATION, "no init frame").await,
    };
    if fault == Some(Fault::ResetBeforeResponse) {
        // The command travels in the `init` frame: the connection drops once it has arrived,
        // before any answer (no close frame), so the client cannot know whether it ran.
        return;
    }
    let data = first
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if first.get("type").and_then(Value::as_str) != Some("init") {
        let _ = ws.send(error_frame("Expected an init message")).await;
        return close(&mut ws, CloseCode::POLICY_VIOLATION, "expected init").await;
    }
    let auth = data.get("auth").and_then(Value::as_object);
    let token = auth
        .filter(|a| a.get("type").and_then(Value::as_str) == Some("apiToken"))
        .and_then(|a| a.get("apiToken"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if fault == Some(Fault::AuthFailure) || !st.accepts(token) {
        let reply = json!({"type": "init", "data": {"auth": "failed", "message": "Authentication failed: invalid API token"}});
        let _ = ws.send(text(&reply)).await;
        // The Python one-shot sends `stdInEnd` right behind `init`, without waiting: take it
        // before closing, so the client reads the refusal rather than a closed socket.
        let _ = tokio::time::timeout(Duration::from_millis(200), next_frame(&mut ws)).await;
        return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
    }
    let ctx = match context(
        data.get("context")
            .and_then(Value::as_object)
            .unwrap_or(&serde_json::Map::new()),
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = ws.send(error_frame(&e)).await;
            return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
        }
    };
    // An instance or container named in the context must be the entity's own.
    for (what, asked, own) in [
        (
            "Instance",
            ctx.instance.as_deref(),
            entity.instance.as_str(),
        ),
        ("Container", ctx.container.as_deref(), entity.container()),
    ] {
        if let Some(asked) = asked.filter(|a| *a != own) {
            let _ = ws
                .send(error_frame(&format!("{what} {asked} not found")))
                .await;
            return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
        }
    }
    // `user`: a name or uid of the image (the docs: "the name or uid of the user").
    let user = match ctx.user.as_deref() {
        None => User::root(),
        Some(u) => match entity
            .sandbox
            .spec()
            .users()
            .into_iter()
            .find(|x| x.name == u || x.uid.to_string() == u)
        {
            Some(found) => found.clone(),
            None => {
                let _ = ws
                    .send(error_frame(&format!(
                        "unable to find user {u}: no matching entries in passwd file"
                    )))
                    .await;
                return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
            }
        },
    };

    // 2. Start the command, its stdin a pipe fed by the payload frames.
    let argv = if ctx.tty {
        // A real pseudo-terminal: stdout and stderr merge, with its line discipline.
        vec![
            "script".to_owned(),
            "-qefc".to_owned(),
            execseam_emulator_kit::sh::join(&ctx.argv),
            "/dev/null".to_owned(),
        ]
    } else {
        ctx.argv.clone()
    };
    let running = match stream::start(
        &entity.sandbox,
        &user,
        &argv,
        &BTreeMap::new(),
        WORKDIR,
        true,
        // The exit once the pipes close, as Kubernetes' exec reports it (containerd's CRI
        // execInternal waits on attachDone): a background child holding stdout delays it.
        None,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => {
            let _ = ws.send(error_frame(&format!("exec failed: {e:?}"))).await;
            return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
        }
    };
    let (host_pid, mut events) = (running.host_pid, running.events);
    let sandbox = entity.sandbox.clone();
    // The client left, or the container went: the command's group is killed.
    let kill = move || {
        if host_pid != 0 {
            let _ = sandbox.signal_group(host_pid, libc::SIGKILL);
        }
    };
    let reply = json!({"type": "init", "data": {"auth": "successful", "context": {
        "instanceName": entity.instance, "containerName": entity.container(),
    }}});
    if ws.send(text(&reply)).await.is_err() {
        return;
    }
    let stdin = stdin_pump(running.stdin);
    let vanish = fault == Some(Fault::SandboxVanishes);
    let vanish_at = tokio::time::Instant::now() + Duration::from_millis(300);
    if fault == Some(Fault::MalformedBody) {
        let _ = ws
            .send(Message::text("{\"type\":\"stdOut\",\"data\":"))
            .await;
    }
    let (mut out, mut err) = (Utf8::default(), Utf8::default());
    let base64 = ctx.base64;
    let exit = loop {
        let vanish_timer = async {
            if vanish {
                tokio::time::sleep_until(vanish_at).await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            frame = next_frame(&mut ws) => match frame {
                Ok(Some(f)) => match f.get("type").and_then(Value::as_str) {
                    Some("payload") => {
                        let data = f.get("data").and_then(Value::as_str).unwrap_or("");
                        let bytes = if base64 {
                            match B64.decode(data) {
                                Ok(b) => b,
                                Err(_) => {
                                    let _ = ws.send(error_frame("payload is not valid base64")).await;
                                    return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
                                }
                            }
                        } else {
                            data.as_bytes().to_vec()
                        };
                        let _ = stdin.send(Some(Bytes::from(bytes)));
                    }
                    Some("stdInEnd") => {
                        let _ = stdin.send(None);
                    }
                    Some("resize") | Some("init") => {}
                    _ => {
                        let _ = ws.send(error_frame(&format!("unable to parse message: {}", Value::Object(f)))).await;
                        return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
                    }
                },
                Ok(None) => {
                    kill(); // the client left
                    return;
                }
                Err(e) => {
                    let _ = ws.send(error_frame(&e)).await;
                    return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
                }
            },
            ev = events.recv() => match ev {
                Some(Out::Stdout(b)) => {
                    if !send_output(&mut ws, "stdOut", &b, base64, &mut out).await { kill(); return; }
                }
                Some(Out::Stderr(b)) => {
                    if !send_output(&mut ws, "stdErr", &b, base64, &mut err).await { kill(); return; }
                }
                Some(Out::Exit(code)) => break code,
                None => {
                    let _ = ws.send(error_frame("the command's stream ended without an exit")).await;
                    return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
                }
            },
            () = vanish_timer => {
                kill();
                return close(&mut ws, CloseCode::INTERNAL_SERVER_ERROR, "container terminated").await;
            }
        }
    };
    for (name, dec) in [("stdOut", &mut out), ("stdErr", &mut err)] {
        let tail = dec.finish();
        if !base64 && !tail.is_empty() {
            let _ = ws.send(text(&json!({"type": name, "data": tail}))).await;
        }
    }
    match fault {
        Some(Fault::CutBeforeExit) => return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await,
        Some(Fault::ServerError) => {
            let _ = ws.send(error_frame("Internal server error")).await;
            return close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
        }
        _ => {}
    }
    let code = match st.options().exit_code {
        ExitCodeJson::Number => json!(exit),
        ExitCodeJson::NumberOnSuccess if exit == 0 => json!(0),
        _ => json!(exit.to_string()),
    };
    let status = if exit == 0 { "Success" } else { "Failure" };
    let _ = ws
        .send(text(
            &json!({"type": "completion", "data": {"exitCode": code, "status": status}}),
        ))
        .await;
    close(&mut ws, CloseCode::NORMAL_CLOSURE, "").await;
}

/// One output chunk as frames (text: decoded UTF-8; base64: each frame decodable alone).
async fn send_output(ws: &mut Ws, name: &str, data: &[u8], base64: bool, dec: &mut Utf8) -> bool {
    for chunk in data.chunks(MAX_CHUNK) {
        let payload = if base64 {
            B64.encode(chunk)
        } else {
            dec.push(chunk)
        };
        if payload.is_empty() {
            continue;
        }
        if ws
            .send(text(&json!({"type": name, "data": payload})))
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

/// Feeds stdin chunks to the command in order; `None` closes it. A command that stops reading
/// makes the rest go nowhere, as a closed pipe does.
fn stdin_pump(mut pipe: Option<ChildStdin>) -> mpsc::UnboundedSender<Option<Bytes>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<Bytes>>();
    tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            match (item, pipe.as_mut()) {
                (Some(b), Some(w)) => {
                    if w.write_all(&b).await.is_err() {
                        pipe = None;
                    }
                }
                (None, _) => pipe = None,
                (Some(_), None) => {}
            }
        }
    });
    tx
}
