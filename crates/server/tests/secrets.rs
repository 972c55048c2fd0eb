//! No token, source, stdin, env value or store password in logs, metrics or error bodies: a run
//! of the real binary with planted secrets, every answer and every line it printed grepped.

mod common;

use common::*;
use execseam_chrono::{ChronoExec, Operation};
use execseam_chrono_contract::wire::{ExecuteRequest, InputFile, Language};
use execseam_core::{Command, Exec};

const SOURCE: &str = "PLANTED-SOURCE-7f3a";
const ENV: &str = "PLANTED-ENV-91c2";
const STDIN: &str = "PLANTED-STDIN-5d0e";
const BAD_TOKEN: &str = "PLANTED-TOKEN-44b1";
const PASSWORD: &str = "PLANTED-PASSWORD-0a9f";

#[tokio::test]
async fn planted_secrets_never_leave_the_server() {
    // PostgreSQL trusts loopback, so any password is accepted: plant one in the store URL.
    let url = postgres_db("secrets").await;
    let store = url.replacen("execseam@", &format!("execseam:{PASSWORD}@"), 1);
    let tokens = token_file();
    let p = Proc::spawn(
        &[
            "--store",
            &store,
            "--tokens",
            tokens.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--max-payload-bytes",
            "100000",
        ]
        .map(String::from),
    );
    let base = p.base_url.clone();
    let seen = std::cell::RefCell::new(String::new());
    let http = http_client();
    let send = async |method: reqwest::Method,
                      path: &str,
                      token: &str,
                      key: Option<&str>,
                      body: String| {
        let mut r = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(token)
            .body(body);
        if let Some(k) = key {
            r = r.header("idempotency-key", k);
        }
        let resp = r.send().await.unwrap();
        let mut s = format!("{} {:?}\n", resp.status(), resp.headers());
        s.push_str(&resp.text().await.unwrap());
        seen.borrow_mut().push_str(&s);
        seen.borrow_mut().push('\n');
        s
    };
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;
    // Rejected credentials, bodies with the secrets in the wrong places, a bad input file.
    send(
        post.clone(),
        "/executions",
        BAD_TOKEN,
        Some("k0"),
        "{}".into(),
    )
    .await;
    send(post.clone(), "/execute", BAD_TOKEN, None, "{}".into()).await;
    for body in [
        format!(r#"{{"language":"bash","script":"x","timeout_secs":"{SOURCE}"}}"#),
        format!(r#"{{"language":"{SOURCE}","script":"x"}}"#),
        format!(r#"{{"language":"bash","script":"x","env":{{"K":{{"v":"{ENV}"}}}}}}"#),
        format!(r#"{{"language":"bash","script":"{SOURCE}"#),
        format!(
            r#"{{"language":"bash","script":"{}{SOURCE}"}}"#,
            "y".repeat(100_000)
        ),
    ] {
        send(
            post.clone(),
            "/executions",
            ALICE,
            Some(&key("bad")),
            body.clone(),
        )
        .await;
        send(post.clone(), "/execute", ALICE, None, body).await;
    }
    let bad_file = serde_json::json!({"language": "bash", "script": format!("# {SOURCE}\ntrue"),
        "input_files": [{"path": "in.txt", "content": format!("!!{STDIN}!!")}]});
    send(post.clone(), "/execute", ALICE, None, bad_file.to_string()).await;

    // Programs that carry the secrets in their source, env and stdin, and do not print them.
    let mut req = ExecuteRequest::new(
        Language::Bash,
        format!("# {SOURCE}\ntest \"$K\" = {ENV} && grep -q {STDIN} in.txt && echo fine"),
        30,
    );
    req.env.insert("K".into(), ENV.into());
    use base64::Engine as _;
    req.input_files.push(InputFile {
        path: "in.txt".into(),
        content: base64::engine::general_purpose::STANDARD.encode(STDIN),
    });
    let sync = send(
        post.clone(),
        "/execute",
        ALICE,
        None,
        serde_json::to_string(&req).unwrap(),
    )
    .await;
    assert!(sync.contains("fine"), "{sync}");
    let c = client(&base, ALICE);
    let mut op = Operation::new(key("ok"), req.clone()).unwrap();
    assert_eq!(ran(&run(&c, &mut op).await), ("fine\n", 0));
    let id = op.operation_id.clone().unwrap();
    for path in [
        format!("/executions/{id}"),
        format!("/executions/{id}/result"),
    ] {
        send(get.clone(), &path, ALICE, None, String::new()).await;
        send(get.clone(), &path, BOB, None, String::new()).await;
    }
    // A timeout and a cancel, whose messages come from the server.
    let mut slow = req.clone();
    slow.script = format!("# {SOURCE}\nsleep 30");
    slow.timeout_secs = Some(1);
    send(
        post.clone(),
        "/execute",
        ALICE,
        None,
        serde_json::to_string(&slow).unwrap(),
    )
    .await;
    slow.timeout_secs = Some(60);
    let a = c.submit(&key("slow"), &slow).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    send(
        post.clone(),
        &format!("/executions/{}/cancel", a.receipt.operation_id),
        ALICE,
        None,
        "{}".into(),
    )
    .await;
    send(
        post.clone(),
        "/execute/stream",
        ALICE,
        None,
        serde_json::to_string(&req).unwrap(),
    )
    .await;
    // The adapter's own path (stdin through input_files, env through the wrapper).
    let chrono = ChronoExec::new(chrono_config(&base, ALICE)).unwrap();
    let cmd = Command::builder([
        "sh",
        "-c",
        &format!("read -r x; test \"$x\" = {STDIN} && test \"$K\" = {ENV}; echo $?"),
    ])
    .env("K", ENV)
    .stdin(format!("{STDIN}\n").into_bytes())
    .build()
    .unwrap();
    let out = chrono.exec(cmd).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"0\n");
    send(get.clone(), "/metrics", ALICE, None, String::new()).await;
    send(get.clone(), "/healthz", ALICE, None, String::new()).await;
    let seen = seen.into_inner();
    let mut p = p;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status();
    let _ = p.child.wait();
    let logs = p.output();
    assert!(logs.contains("listening on"), "{logs}");
    assert!(
        seen.contains("execseam_operations"),
        "the metrics were read"
    );
    for secret in [SOURCE, ENV, STDIN, BAD_TOKEN, PASSWORD, ALICE, BOB] {
        assert!(
            !logs.contains(secret),
            "{secret} in the server's output:\n{logs}"
        );
        assert!(!seen.contains(secret), "{secret} in an answer:\n{seen}");
    }
}
