//! A sandbox that `execseam run` created is removed before the CLI exits; one named by the
//! caller is kept (against the E2B emulator, whose control plane lists running sandboxes).

use std::io::{Read, Write};
use std::net::TcpStream;

/// One plain HTTP/1.1 request to the emulator's control plane; returns the body.
fn http(base: &str, key: &str, method: &str, path: &str, body: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-API-KEY: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 2"), "{resp}");
    resp.split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_created_by_the_run_is_removed_and_an_existing_one_is_kept() {
    let emu = execseam_emulators::start("e2b", Default::default())
        .await
        .unwrap();
    let key = emu
        .env
        .iter()
        .find(|(k, _)| k == "E2B_API_KEY")
        .unwrap()
        .1
        .clone();
    let base = emu.base_url.clone();
    let env = emu.env.clone();
    let run = move |extra: Vec<(String, String)>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_execseam"));
        cmd.args([
            "run",
            "--adapter",
            "e2b",
            "--",
            "sh",
            "-c",
            "printf ran; exit 4",
        ]);
        cmd.envs(env.iter().chain(extra.iter()).map(|(k, v)| (k, v)));
        cmd.output().unwrap()
    };
    let first = run.clone();
    let out = tokio::task::spawn_blocking(move || first(vec![]))
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.status.code()),
        (&b"ran"[..], Some(4))
    );
    assert_eq!(
        http(&base, &key, "GET", "/sandboxes", ""),
        "[]",
        "the sandbox the run created is gone"
    );

    // A sandbox named by --sandbox (EXECSEAM_SANDBOX) belongs to the caller: it is kept.
    let created = http(
        &base,
        &key,
        "POST",
        "/sandboxes",
        r#"{"templateID":"base"}"#,
    );
    let id = serde_json::from_str::<serde_json::Value>(&created).unwrap()["sandboxID"]
        .as_str()
        .unwrap()
        .to_owned();
    let named = vec![("EXECSEAM_SANDBOX".to_owned(), id.clone())];
    let out = tokio::task::spawn_blocking(move || run(named))
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        http(&base, &key, "GET", "/sandboxes", "").contains(&id),
        "an existing sandbox is kept"
    );
    http(&base, &key, "DELETE", &format!("/sandboxes/{id}"), "");
}
