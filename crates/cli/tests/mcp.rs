//! `execseam mcp` driven by a real MCP client (rmcp's, the official Rust SDK) over stdio: the
//! handshake, `tools/list` with every tool's schema checked, a call of every tool against the
//! local adapter and against the E2B emulator, bad arguments answered with a tool error (rmcp
//! turns a parameter deserialization failure into `isError: true` with "failed to deserialize
//! parameters: …": `rmcp/src/handler/server/router/tool.rs`, `into_tool_argument_error`, following
//! the MCP spec's rule that input validation errors are tool execution errors) while the server
//! keeps serving, and the sandbox it created destroyed at stdin EOF and on SIGTERM.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use common::http;

type Client = RunningService<RoleClient, ()>;

const TOOLS: [&str; 15] = [
    "apply_patch",
    "bash",
    "bash_kill",
    "bash_output",
    "bash_release",
    "bash_stdin",
    "code",
    "edit",
    "exec_command",
    "glob",
    "grep",
    "list",
    "read",
    "write",
    "write_stdin",
];

async fn connect(args: &[&str], env: &[(String, String)]) -> (Client, Option<u32>) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_execseam"));
    cmd.arg("mcp")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("EXECSEAM_SANDBOX");
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id();
    let client = ().serve(transport).await.expect("initialize");
    (client, pid)
}

async fn call(c: &Client, tool: &str, args: Value) -> Result<CallToolResult, ServiceError> {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
}

/// A successful call's structured content.
async fn ok(c: &Client, tool: &str, args: Value) -> Value {
    let r = call(c, tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
    assert_eq!(r.is_error, Some(false), "{tool} {args}: {r:?}");
    r.structured_content.expect("structured content")
}

/// A tool-level error's structured `error` object.
async fn tool_err(c: &Client, tool: &str, args: Value) -> Value {
    let r = call(c, tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
    assert_eq!(r.is_error, Some(true), "{tool} {args}: {r:?}");
    r.structured_content.expect("structured content")["error"].clone()
}

/// Bad arguments: a tool error naming what is wrong, never a crash.
async fn invalid_params(c: &Client, tool: &str, args: Value) {
    let r = call(c, tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
    assert_eq!(r.is_error, Some(true), "{tool} {args}: {r:?}");
    let text = serde_json::to_string(&r.content).unwrap();
    let typed = r
        .structured_content
        .as_ref()
        .is_some_and(|v| v["error"]["code"] == "invalid-argument");
    assert!(
        typed || text.contains("failed to deserialize parameters"),
        "{tool} {args}: {r:?}"
    );
}

async fn schemas(c: &Client) {
    let tools = c.list_all_tools().await.unwrap();
    let names: BTreeSet<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, TOOLS.into_iter().collect(), "tools/list");
    for t in &tools {
        let s = Value::Object((*t.input_schema).clone());
        assert_eq!(s["type"], "object", "{}: {s}", t.name);
        assert_eq!(s["additionalProperties"], false, "{}: {s}", t.name);
        let desc = t.description.as_deref().unwrap_or_default();
        assert!(
            desc.len() > 60,
            "{}: a description a model can act on: {desc:?}",
            t.name
        );
        let required: BTreeSet<&str> = s["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let want: &[&str] = match t.name.as_ref() {
            "bash" => &[],
            "glob" => &["pattern"],
            "grep" => &["pattern"],
            "read" => &["path"],
            "write" => &["path", "content"],
            "edit" => &["path", "old", "new"],
            "apply_patch" => &["patch"],
            "code" => &["language", "source"],
            "list" => &[],
            "bash_output" | "bash_stdin" | "bash_kill" | "bash_release" => &["id"],
            "exec_command" => &["cmd"],
            "write_stdin" => &["session_id"],
            other => panic!("{other}"),
        };
        assert_eq!(required, want.iter().copied().collect(), "{}: {s}", t.name);
        for p in want {
            assert!(
                s["properties"][p]["description"].is_string(),
                "{}.{p}: {s}",
                t.name
            );
        }
    }
    let grep = tools.iter().find(|t| t.name == "grep").unwrap();
    let g = serde_json::to_string(&grep.input_schema).unwrap();
    for word in [
        "content",
        "files",
        "count",
        "before",
        "after",
        "ignore_case",
        "fixed",
    ] {
        assert!(g.contains(word), "grep's schema names {word}: {g}");
    }
}

/// Every tool once, in `dir` (absolute, writable, empty).
async fn every_tool(c: &Client, dir: &str) {
    let w = ok(
        c,
        "write",
        json!({ "path": format!("{dir}/src/lib.rs"), "content": "fn a() {}\nfn needle() {}\n" }),
    )
    .await;
    assert_eq!(w["bytes"], 25);
    ok(
        c,
        "write",
        json!({ "path": format!("{dir}/notes.txt"), "content": "one\ntwo\nthree\n" }),
    )
    .await;
    let r = ok(
        c,
        "read",
        json!({ "path": format!("{dir}/notes.txt"), "offset": 2, "limit": 1 }),
    )
    .await;
    assert_eq!(
        (r["content"].clone(), r["truncated"].clone()),
        (json!("two\n"), json!(0))
    );
    let e = ok(
        c,
        "edit",
        json!({ "path": format!("{dir}/notes.txt"), "old": "two", "new": "2" }),
    )
    .await;
    assert_eq!(e["replacements"], 1);
    let e = tool_err(
        c,
        "edit",
        json!({ "path": format!("{dir}/notes.txt"), "old": "zzz", "new": "" }),
    )
    .await;
    assert_eq!(
        (e["code"].clone(), e["retry"].clone()),
        (json!("no-match"), json!({"class": "never"}))
    );
    let g = ok(c, "glob", json!({ "pattern": "**/*.rs", "dir": dir })).await;
    assert_eq!(
        (g["paths"].clone(), g["omitted"].clone()),
        (json!(["src/lib.rs"]), json!(0))
    );
    let l = ok(c, "list", json!({ "dir": dir, "depth": 2, "limit": 2 })).await;
    assert_eq!(
        (l["entries"].clone(), l["omitted"].clone()),
        (
            json!([{"path": "notes.txt", "is_dir": false}, {"path": "src", "is_dir": true}]),
            json!(1)
        )
    );
    let g = ok(
        c,
        "grep",
        json!({ "pattern": "NEEDLE", "ignore_case": true, "dir": dir, "before": 1 }),
    )
    .await;
    assert_eq!(
        g["matches"],
        json!([{"path": "src/lib.rs", "line": 2, "text": "fn needle() {}", "before": ["fn a() {}"], "after": []}])
    );
    let g = ok(
        c,
        "grep",
        json!({ "pattern": "n", "dir": dir, "mode": "count" }),
    )
    .await;
    assert_eq!(
        g["counts"],
        json!([{"path": "notes.txt", "count": 1}, {"path": "src/lib.rs", "count": 2}])
    );
    let g = ok(
        c,
        "grep",
        json!({ "pattern": "e", "dir": dir, "mode": "files", "limit": 1 }),
    )
    .await;
    assert_eq!(
        (g["files"].clone(), g["omitted"].clone()),
        (json!(["notes.txt"]), json!(1))
    );
    let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n one\n-2\n+two\n*** Add File: new.md\n+# new\n*** End Patch\n";
    let p = ok(c, "apply_patch", json!({ "patch": patch, "dir": dir })).await;
    assert_eq!(
        p["files"],
        json!([{"path": "notes.txt", "change": "modified"}, {"path": "new.md", "change": "created"}])
    );
    let e = tool_err(c, "apply_patch", json!({ "patch": "*** Begin Patch\n*** Update File: new.md\n-nope\n+x\n*** Add File: z\n+z\n*** End Patch", "dir": dir })).await;
    assert_eq!(e["code"], "patch-conflict");
    let gone = tool_err(c, "read", json!({ "path": format!("{dir}/z") })).await;
    assert_eq!(gone["code"], "not-found", "nothing was written");
    let b = ok(
        c,
        "bash",
        json!({ "script": "cat; echo err >&2; exit 3", "stdin": "in\n", "workdir": dir }),
    )
    .await;
    assert_eq!(
        (b["stdout"].clone(), b["stderr"].clone(), b["exit"].clone()),
        (json!("in\n"), json!("err\n"), json!({"code": 3})),
        "a non-zero exit is a normal result"
    );
    let b = ok(
        c,
        "bash",
        json!({ "argv": ["sh", "-c", "printf %s \"$X\"; pwd"], "env": {"X": "x"}, "workdir": dir }),
    )
    .await;
    assert_eq!(b["stdout"], format!("x{dir}\n"));
    let b = ok(
        c,
        "bash",
        json!({ "script": "head -c 100000 /dev/zero | tr '\\0' a" }),
    )
    .await;
    assert_eq!(
        b["truncated"]["stdout"],
        100000 - 4096,
        "the server's --max-output"
    );
    let t = tool_err(c, "bash", json!({ "script": "sleep 5", "timeout_secs": 1 })).await;
    assert_eq!(
        (t["code"].clone(), t["kind"].clone()),
        (json!("exec"), json!("timeout-command"))
    );
    assert_eq!(t["retry"]["class"], "unsafe");
    let code = ok(
        c,
        "code",
        json!({ "language": "bash", "source": "echo $((6*7)); exit 1" }),
    )
    .await;
    assert_eq!(
        (code["stdout"].clone(), code["exit"].clone()),
        (json!("42\n"), json!({"code": 1}))
    );
    // Bad arguments: invalid params, and the server keeps serving.
    invalid_params(c, "read", json!({})).await;
    invalid_params(
        c,
        "edit",
        json!({ "path": "x", "old": "a", "new": "b", "bogus": 1 }),
    )
    .await;
    invalid_params(c, "bash", json!({ "script": 5 })).await;
    invalid_params(c, "bash", json!({ "script": "true", "argv": ["true"] })).await;
    invalid_params(c, "grep", json!({ "pattern": "x", "mode": "everything" })).await;
    invalid_params(c, "code", json!({ "language": "cobol", "source": "" })).await;
    ok(c, "list", json!({ "dir": dir })).await;
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir()
        .canonicalize()
        .unwrap()
        .join(format!("execseam-mcp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_every_tool_through_a_real_client() {
    let d = scratch("local");
    let dir = d.to_str().unwrap().to_owned();
    let (client, _) = connect(
        &["--adapter", "local", "--root", &dir, "--max-output", "4096"],
        &[],
    )
    .await;
    let info = client.peer_info().expect("server info");
    assert!(info.capabilities.tools.is_some(), "{info:?}");
    schemas(&client).await;
    every_tool(&client, &dir).await;
    // Relative paths resolve against --root.
    let r = ok(&client, "read", json!({ "path": "new.md" })).await;
    assert_eq!(r["content"], "# new\n");
    client.cancel().await.unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

async fn until_no_sandbox(base: &str, key: &str) {
    let start = Instant::now();
    loop {
        let list = http(base, key, "GET", "/sandboxes");
        if list == "[]" {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the sandbox is still there: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2b_emulator_every_tool_and_the_sandbox_is_destroyed_at_exit() {
    let common::Emu { emu, key, base, .. } = common::e2b().await;
    assert_eq!(http(&base, &key, "GET", "/sandboxes"), "[]");
    let (client, _) = connect(&["--adapter", "e2b", "--max-output", "4096"], &emu.env).await;
    let list = http(&base, &key, "GET", "/sandboxes");
    assert!(
        list.contains("sandboxID"),
        "a sandbox was created at start: {list}"
    );
    schemas(&client).await;
    // A fresh directory inside the sandbox.
    let made = ok(
        &client,
        "bash",
        json!({ "script": "d=$(mktemp -d) && cd \"$d\" && pwd -P" }),
    )
    .await;
    let dir = made["stdout"].as_str().unwrap().trim().to_owned();
    every_tool(&client, &dir).await;
    // stdin EOF (the client goes away): the sandbox is destroyed.
    client.cancel().await.unwrap();
    until_no_sandbox(&base, &key).await;

    // SIGTERM: the same.
    let (client, pid) = connect(&["--adapter", "e2b"], &emu.env).await;
    ok(&client, "list", json!({ "dir": "/" })).await;
    assert!(http(&base, &key, "GET", "/sandboxes").contains("sandboxID"));
    let st = std::process::Command::new("kill")
        .args(["-TERM", &pid.unwrap().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    until_no_sandbox(&base, &key).await;
    drop(client);
}

/// One HTTP/1.1 POST of a JSON-RPC message to the streamable HTTP endpoint; the status line,
/// the session id header and the raw body (SSE frames).
fn post(url: &str, session: Option<&str>, body: &Value) -> (String, Option<String>, String) {
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_once('/').unwrap();
    let body = body.to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    let sid = session.map_or(String::new(), |id| {
        format!("Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-06-18\r\n")
    });
    write!(
        s,
        "POST /{path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{sid}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    let id = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("mcp-session-id: ")
            .map(|_| l[16..].trim().to_owned())
    });
    (status, id, body.to_owned())
}

#[test]
fn streamable_http_behind_a_flag() {
    let d = scratch("http");
    let dir = d.to_str().unwrap().to_owned();
    std::fs::write(d.join("hello.txt"), "hi there\n").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args([
            "mcp",
            "--adapter",
            "local",
            "--root",
            &dir,
            "--http",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.trim().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw-http-test", "version": "0"}}});
    let (status, sid, body) = post(&url, None, &init);
    assert!(status.contains(" 200"), "{status} {body}");
    assert!(body.contains("serverInfo"), "{body}");
    let sid = sid.expect("a session id");
    let (status, _, _) = post(
        &url,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(status.contains(" 202"), "{status}");
    let (_, _, body) = post(
        &url,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    for t in TOOLS {
        assert!(body.contains(&format!("\"name\":\"{t}\"")), "{t}: {body}");
    }
    let (_, _, body) = post(
        &url,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "read", "arguments": {"path": "hello.txt"}}}),
    );
    assert!(body.contains("hi there"), "{body}");
    let st = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let _ = std::fs::remove_dir_all(&d);
}
