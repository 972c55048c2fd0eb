//! Planted secrets never reach a log line, at `RUST_LOG=trace`, for every adapter against its
//! emulator: the API key (the emulator's `--token`), an env value, stdin and the content of a file
//! written through the tools, sent through `execseam mcp` (the tools subset: bash with env and
//! stdin, write, read, a failing write). Both processes log: the emulator (`execseam emulate`)
//! and the server, each at trace to stderr; every line of both is searched. Tool errors are
//! searched too. Then the lifecycle calls through `execseam sandbox` (create with a planted env
//! value and a label, connect, list, destroy, a failing connect) at trace: each runs in its
//! `lifecycle{provider, operation, sandbox, status, kind, count}` span, and their lines are
//! searched the same way.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

const TOKEN: &str = "tok-PLANTED-9f8e7d6c5b4a";
const ENV_SECRET: &str = "env-PLANTED-1a2b3c4d";
const STDIN_SECRET: &str = "stdin-PLANTED-5e6f7a8b";
const FILE_SECRET: &str = "file-PLANTED-9c0d1e2f";

struct Emu {
    child: Child,
    /// The emulator's exports, then the adapter variables its emulated target adds
    /// (`execseam_emulated::targets`: a Fly image, longer sandbox lifetimes, …).
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
}

impl Drop for Emu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn emulate(provider: &str, dir: &std::path::Path) -> Emu {
    let log = dir.join(format!("{provider}-emulator.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["emulate", provider, "--token", TOKEN])
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            if tx.send(l.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let mut env = Vec::new();
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the emulator starts");
    assert!(first.contains("listening"), "{first}");
    // The exports follow at once; a pause ends them.
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(700)) {
        if let Some(kv) = l.strip_prefix("export ") {
            let (k, v) = kv.split_once('=').unwrap();
            env.push((k.to_owned(), v.trim_matches('\'').to_owned()));
        }
    }
    assert!(!env.is_empty(), "{provider}: no exports");
    let target = execseam_emulated::targets_of(provider)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{provider}: no emulated target"));
    env.extend(
        target
            .vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Emu { child, env, log }
}

async fn call(
    c: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
) -> Value {
    let Value::Object(map) = args else {
        unreachable!()
    };
    let r = c
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    json!({ "is_error": r.is_error, "content": r.content, "structured": r.structured_content })
}

/// One `execseam sandbox …` command at `RUST_LOG=trace` against the emulator: (success, stdout,
/// stderr, where the log goes).
fn sandbox_cmd(emu: &Emu, provider: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .arg("sandbox")
        .arg(args[0])
        .args(["--adapter", provider])
        .args(&args[1..])
        .envs(emu.env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The lifecycle calls through `execseam sandbox` (create with a planted env value and a label,
/// connect, list, destroy), each in its `lifecycle{provider, operation, sandbox, …}` span. Returns
/// every line they logged, and which operations ran.
fn lifecycle_calls(emu: &Emu, provider: &str) -> (String, Vec<&'static str>) {
    let mut logs = String::new();
    let mut ran = Vec::new();
    let label = "execseam-secrets=lifecycle";
    let env = format!("K={ENV_SECRET}");
    let mut created = None;
    for args in [
        vec!["create", "--label", label, "--env", &env],
        vec!["create", "--label", label],
    ] {
        let (ok, out, err) = sandbox_cmd(emu, provider, &args);
        logs.push_str(&err);
        if ok {
            created = Some(out.trim().to_owned());
            break;
        }
    }
    let span = |op: &str| format!("lifecycle{{provider=\"{provider}\" operation=\"{op}\"");
    let default = emu
        .env
        .iter()
        .find(|(k, _)| k == "EXECSEAM_SANDBOX")
        .map(|(_, v)| v.clone());
    if let Some(id) = &created {
        ran.push("create");
        assert!(
            logs.lines()
                .any(|l| l.contains(&span("create")) && l.contains(&format!("sandbox=\"{id}\""))),
            "{provider}: no create span with the new sandbox's id {id}:\n{logs}"
        );
    }
    if let Some(id) = created.as_ref().or(default.as_ref()) {
        let (ok, _, err) = sandbox_cmd(emu, provider, &["connect", id]);
        if ok {
            ran.push("connect");
            assert!(
                err.lines()
                    .any(|l| l.contains(&span("connect"))
                        && l.contains(&format!("sandbox=\"{id}\""))),
                "{provider}: no connect span with sandbox {id}:\n{err}"
            );
        }
        logs.push_str(&err);
    }
    let (ok, out, err) = sandbox_cmd(emu, provider, &["list", "--label", label]);
    if ok {
        ran.push("list");
        let n = out.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(
            err.lines()
                .any(|l| l.contains(&span("list")) && l.contains(&format!("count={n}"))),
            "{provider}: no list span with count={n}:\n{out}\n{err}"
        );
    }
    logs.push_str(&err);
    if let Some(id) = &created {
        let (ok, _, err) = sandbox_cmd(emu, provider, &["destroy", id]);
        assert!(ok, "{provider}: destroy {id}: {err}");
        ran.push("destroy");
        assert!(
            err.lines()
                .any(|l| l.contains(&span("destroy")) && l.contains(&format!("sandbox=\"{id}\""))),
            "{provider}: no destroy span with sandbox {id}:\n{err}"
        );
        logs.push_str(&err);
    }
    // An unknown id: a failed call's span carries the error's kind (and its status, if any).
    let (ok, _, err) = sandbox_cmd(emu, provider, &["connect", "execseamnosuchsandbox0"]);
    if !ok && err.contains(&span("connect")) {
        assert!(
            err.lines()
                .any(|l| l.contains(&span("connect")) && l.contains("kind=")),
            "{provider}: the failed connect's span has no kind:\n{err}"
        );
    }
    logs.push_str(&err);
    (logs, ran)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_secrets_never_reach_a_log_line_at_trace() {
    let dir = std::env::temp_dir().join(format!("execseam-secrets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut ran = Vec::new();
    let mut lifecycle_ran = Vec::new();
    for provider in execseam_emulators::providers().iter() {
        let emu = emulate(provider, &dir);
        let server_log = dir.join(format!("{provider}-mcp.log"));
        // Create a sandbox, or (connect-only providers) attach to the emulator's default one.
        let mut client = None;
        for attach in [false, true] {
            let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_execseam"));
            cmd.args(["mcp", "--adapter", provider, "--root", "/tmp"])
                .envs(emu.env.iter().map(|(k, v)| (k, v)))
                .env("RUST_LOG", "trace");
            if !attach {
                cmd.env_remove("EXECSEAM_SANDBOX");
            }
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::fs::File::create(&server_log).unwrap())
                .spawn()
                .unwrap();
            if let Ok(c) = ().serve(transport).await {
                client = Some(c);
                break;
            }
        }
        let client = client.unwrap_or_else(|| {
            panic!(
                "{provider}: the server did not start: {}",
                std::fs::read_to_string(&server_log).unwrap_or_default()
            )
        });
        let mut results = Vec::new();
        let b = call(
            &client,
            "bash",
            json!({ "script": "printf %s \"$K\" | wc -c; wc -c", "env": {"K": ENV_SECRET}, "stdin": STDIN_SECRET }),
        )
        .await;
        results.push(b.clone());
        let f = format!("/tmp/execseam-secret-{}-{provider}.txt", std::process::id());
        results.push(
            call(
                &client,
                "write",
                json!({ "path": f, "content": FILE_SECRET }),
            )
            .await,
        );
        results.push(call(&client, "read", json!({ "path": "/no/such/execseam/file" })).await);
        let bad = call(
            &client,
            "write",
            json!({ "path": "/proc/execseam-no/x", "content": FILE_SECRET, "create_parents": false }),
        )
        .await;
        assert_eq!(bad["is_error"], true, "{provider}: {bad}");
        results.push(bad);
        let _ = call(&client, "bash", json!({ "argv": ["rm", "-f", f] })).await;
        client.cancel().await.unwrap();
        if b["is_error"] == false {
            ran.push(*provider);
            assert_eq!(
                b["structured"]["stdout"]
                    .as_str()
                    .map(|s| s.split_whitespace().collect::<Vec<_>>()),
                Some(vec![
                    ENV_SECRET.len().to_string().as_str(),
                    STDIN_SECRET.len().to_string().as_str()
                ]),
                "{provider}: the env value and stdin reached the command: {b}"
            );
        }
        // Let both processes finish their last lines.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (lifecycle_log, ops) = lifecycle_calls(&emu, provider);
        lifecycle_ran.push((*provider, ops));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let emu_env = emu.env.clone();
        let emu_log = emu.log.clone();
        drop(emu);
        let logs = [
            std::fs::read_to_string(&server_log).unwrap(),
            std::fs::read_to_string(&emu_log).unwrap(),
            lifecycle_log,
        ];
        // The MCP server's own sandbox: created (or attached) in a span that names it.
        assert!(
            logs[0].contains(&format!(
                "lifecycle{{provider=\"{provider}\" operation=\"create\""
            )) || logs[0].contains(&format!(
                "lifecycle{{provider=\"{provider}\" operation=\"connect\""
            )),
            "{provider}: the server's sandbox was neither created nor connected in a lifecycle span"
        );
        assert!(
            logs[0].contains("TRACE") && logs[0].contains("exec{provider="),
            "{provider}: the server logged no trace and no exec span"
        );
        if *provider == "e2b" {
            // The emulators' request log (debug): method, route, status, latency.
            assert!(
                logs[1]
                    .lines()
                    .any(|l| l.contains("emulator request method=POST route=/")
                        && l.contains("status=")
                        && l.contains("latency_ms=")),
                "{provider}: {}",
                logs[1]
            );
        }
        // The credentials the emulator hands out (whether or not it took --token).
        let mut secrets: Vec<String> = [TOKEN, ENV_SECRET, STDIN_SECRET, FILE_SECRET]
            .map(str::to_owned)
            .to_vec();
        secrets.extend(
            emu_env
                .iter()
                .filter(|(k, v)| {
                    ["KEY", "TOKEN", "SECRET"].iter().any(|w| k.contains(w)) && v.len() >= 8
                })
                .map(|(_, v)| v.clone()),
        );
        // AWS's access key id is an identifier, not a secret: the AWS SDK prints it in its own
        // Debug output and signs it into every request's Authorization header in the clear,
        // redacting only the secret access key (aws-credential-types, `Credentials`'s Debug).
        // The AgentCore emulator takes --token as that id; its secret key stays planted.
        let public: Vec<&String> = emu_env
            .iter()
            .filter(|(k, _)| k == "AWS_ACCESS_KEY_ID")
            .map(|(_, v)| v)
            .collect();
        secrets.retain(|s| !public.contains(&s));
        for (which, log) in ["server", "emulator", "lifecycle commands"]
            .iter()
            .zip(&logs)
        {
            for secret in &secrets {
                if let Some(line) = log.lines().find(|l| l.contains(secret)) {
                    panic!("{provider}: the {which} logged a planted secret: {line}");
                }
            }
        }
        for r in &results {
            if r["is_error"] == true {
                let text = r.to_string();
                for secret in &secrets {
                    assert!(
                        !text.contains(secret.as_str()),
                        "{provider}: an error carries a secret: {text}"
                    );
                }
            }
        }
    }
    eprintln!("commands ran on: {ran:?}");
    eprintln!("lifecycle calls: {lifecycle_ran:?}");
    let with = |op: &str| {
        lifecycle_ran
            .iter()
            .filter(|(_, ops)| ops.contains(&op))
            .count()
    };
    assert!(
        with("create") >= 5 && with("destroy") >= 5 && with("list") >= 5 && with("connect") >= 5,
        "too few providers ran the lifecycle calls: {lifecycle_ran:?}"
    );
    assert!(
        ran.len() >= 5,
        "too few adapters ran the bash call: {ran:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
