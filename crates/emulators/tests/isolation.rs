//! Every emulator's sandboxes are sandboxes (issue 14's proofs), as root with namespaces:
//! `ps -e` lists only the sandbox's processes; a file written to `/var/tmp` is neither on the host
//! nor in another sandbox; `id -u` is the provider's uid; a command that times out through the
//! provider's own wire (a client that disconnects early, and one that keeps reading) is gone,
//! checked from the host by pid, within 1 s of its deadline; destroying a sandbox through the
//! emulator kills a daemonised child. Each test makes its sandboxes under a state directory of
//! its own and checks it is empty at the end (other people run emulators on this machine).
//!
//! Without root the emulators run in the degraded mode, which has no such isolation: the tests
//! then fail with a clear message rather than pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execseam_core::{Command, Exec, Exit};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::kit::{Isolation, Sandbox, Sandboxing};

/// A state directory of the test's own, checked empty (and removed) at the end.
struct StateDir(PathBuf);

impl StateDir {
    fn new(name: &str) -> StateDir {
        assert_eq!(
            Isolation::detect(),
            Isolation::Namespaces,
            "these proofs need root and util-linux's unshare (the emulators' real sandboxes); \
             the degraded mode has no pid, filesystem or user isolation to prove"
        );
        let p =
            std::env::temp_dir().join(format!("execseam-isolation-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        StateDir(p)
    }

    fn options(&self) -> EmulatorOptions {
        EmulatorOptions {
            sandboxing: Sandboxing {
                state_dir: Some(self.0.clone()),
                ..Sandboxing::default()
            },
            ..EmulatorOptions::default()
        }
    }

    /// Waits for every sandbox of the test to be torn down, then checks nothing is left.
    async fn assert_empty(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_dir(&self.0).unwrap().count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left: Vec<_> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "sandbox state left behind: {left:?}");
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

async fn sh(s: &Sandbox, script: &str) -> execseam_core::Output {
    s.exec()
        .exec(Command::new(["sh", "-c", script]).unwrap())
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Alive and not a zombie.
fn alive(host_pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{host_pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// `ps -e` shows the sandbox's own processes only, `id -u` and the hostname are the provider's,
/// `/var/tmp` is private to the sandbox.
async fn isolated(a: &Sandbox, b: &Sandbox, uid: u32, hostname: &str) {
    let out = sh(a, "ps -e -o pid=,comm=").await;
    let lines: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .collect();
    assert!(
        lines.iter().any(|l| l == "1 init"),
        "pid 1 is the init: {lines:?}"
    );
    for l in &lines {
        let comm = l.split_whitespace().nth(1).unwrap_or("");
        assert!(
            ["init", "sh", "ps"].contains(&comm),
            "ps -e lists a process that is not the sandbox's: {l} in {lines:?}"
        );
    }
    let out = sh(a, "id -u; hostname").await;
    assert_eq!(text(&out.stdout), format!("{uid}\n{hostname}\n"), "{out:?}");
    let name = format!(
        "execseam-isolation-{}-{}",
        std::process::id(),
        std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .unwrap()
            .as_nanos()
    );
    let out = sh(
        a,
        &format!("echo x > /var/tmp/{name} && cat /var/tmp/{name}"),
    )
    .await;
    assert_eq!(text(&out.stdout), "x\n", "{out:?}");
    assert!(
        !Path::new(&format!("/var/tmp/{name}")).exists(),
        "a file written to /var/tmp in a sandbox is on the host"
    );
    let out = sh(b, &format!("cat /var/tmp/{name}")).await;
    assert_ne!(out.exit, Exit::Code(0), "another sandbox sees it: {out:?}");
}

/// Starts a daemon (its own session, detached from the command), returns its host pid.
async fn daemon(s: &Sandbox) -> u32 {
    sh(
        s,
        "setsid sh -c 'echo $$ > /tmp/daemon.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &",
    )
    .await;
    host_pid_from(s, "/tmp/daemon.pid").await
}

/// Reads a pid a command wrote (as the sandbox sees it) and maps it to the host's.
async fn host_pid_from(s: &Sandbox, file: &'static str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pid = s
            .fs(move |fs| std::fs::read_to_string(fs.path(file)))
            .await
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if let Some(host) = pid.and_then(|p| s.host_pid(p)) {
            return host;
        }
        assert!(
            Instant::now() < deadline,
            "{file} never named a live process"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The command the timeout proofs run: a shell that records its pid and its background child's,
/// then waits on a long sleep (the group: the shell and two sleeps).
const TIMED: &str = "sleep 300 & echo $! > /tmp/child.pid; echo $$ > /tmp/cmd.pid; sleep 300";

/// Both processes of [`TIMED`] die within 1 s of `deadline`.
async fn killed_by(s: &Sandbox, deadline: Instant) {
    killed_at(s, deadline, true).await;
}

/// [`TIMED`]'s command dies within 1 s of `deadline`; its background child dies too when
/// `group`, else it must still run then (a provider that kills only the command's pid).
async fn killed_at(s: &Sandbox, deadline: Instant, group: bool) {
    let cmd = host_pid_from(s, "/tmp/cmd.pid").await;
    let child = host_pid_from(s, "/tmp/child.pid").await;
    assert!(
        alive(cmd) && alive(child),
        "the command died before its deadline"
    );
    let _ = s
        .fs(|fs| {
            std::fs::remove_file(fs.path("/tmp/cmd.pid"))?;
            std::fs::remove_file(fs.path("/tmp/child.pid"))
        })
        .await;
    loop {
        if !alive(cmd) && (!group || !alive(child)) {
            assert!(
                group || alive(child),
                "the background child died with the command's pid"
            );
            return;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(1),
            "still running 1 s after the deadline: command {} child {}",
            alive(cmd),
            alive(child)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Destroying the sandbox (`destroy`) kills its daemon.
async fn destroy_kills(s: Arc<Sandbox>, destroy: impl FnOnce()) {
    let d = daemon(&s).await;
    assert!(alive(d));
    let procs = s.processes().unwrap();
    drop(s);
    destroy();
    let deadline = Instant::now() + Duration::from_secs(2);
    while procs.iter().any(|p| alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "processes survived the sandbox's destroy: {:?}",
            procs.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Sends a request and either drops the response at once (a client that disconnects) or reads
/// it to the end; returns when the client is done.
async fn send(req: reqwest::RequestBuilder, read: bool) {
    let resp = req.send().await.expect("the emulator answers");
    if read {
        let _ = resp.bytes().await;
    } else {
        drop(resp);
    }
}

#[cfg(feature = "e2b")]
#[tokio::test]
async fn e2b_sandboxes_are_isolated_and_timeouts_kill() {
    use execseam_emulators::e2b::E2bEmulator;
    let dir = StateDir::new("e2b");
    let emu = E2bEmulator::start(dir.options()).await.unwrap();
    let a = emu.create_sandbox(Duration::from_secs(600)).unwrap();
    let b = emu.create_sandbox(Duration::from_secs(600)).unwrap();
    let (sa, sb) = (
        emu.sandbox(&a.sandbox_id).unwrap(),
        emu.sandbox(&b.sandbox_id).unwrap(),
    );
    isolated(&sa, &sb, 1000, "e2b.local").await;
    // process.Start with Connect-Timeout-Ms: envd kills at the deadline whatever the client does,
    // the command's pid only (e2b-dev/infra envd `handler.go`: a non-PTY process gets no group of
    // its own, and the timeout's context ends `cmd.Process`), so its background child runs on.
    let start = |ms: u64| {
        let body =
            serde_json::json!({"process": {"cmd": "/bin/sh", "args": ["-c", TIMED]}}).to_string();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(body.as_bytes());
        client()
            .post(format!("{}/process.Process/Start", emu.base_url()))
            .header("content-type", "application/connect+json")
            .header("connect-timeout-ms", ms.to_string())
            .header("e2b-sandbox-id", &a.sandbox_id)
            .header("e2b-sandbox-port", "49983")
            .header("x-access-token", &a.envd_access_token)
            .body(framed)
    };
    for read in [false, true] {
        let deadline = Instant::now() + Duration::from_millis(1500);
        let sent = tokio::spawn(send(start(1500), read));
        killed_at(&sa, deadline, false).await;
        sent.await.unwrap();
    }
    let id = a.sandbox_id.clone();
    destroy_kills(sa, || assert!(emu.kill_sandbox(&id))).await;
    drop(sb);
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "daytona")]
#[tokio::test]
async fn daytona_sandboxes_are_isolated_and_timeouts_kill() {
    use execseam_emulators::daytona::DaytonaEmulator;
    let dir = StateDir::new("daytona");
    let emu = DaytonaEmulator::start(dir.options()).await.unwrap();
    let create = || async {
        let v: serde_json::Value = client()
            .post(format!("{}/sandbox", emu.api_url()))
            .bearer_auth(emu.token())
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    let (a, b) = (create().await, create().await);
    let (sa, sb) = (emu.sandbox(&a).unwrap(), emu.sandbox(&b).unwrap());
    isolated(&sa, &sb, 1001, "daytona").await;
    // process/execute with `timeout` (seconds): the daemon's timer kills at the deadline.
    for read in [false, true] {
        let deadline = Instant::now() + Duration::from_secs(1);
        let req = client()
            .post(format!("{}/{a}/process/execute", emu.toolbox_proxy_url()))
            .bearer_auth(emu.token())
            .json(&serde_json::json!({"command": format!("sh -c '{TIMED}'"), "timeout": 1}));
        let sent = tokio::spawn(send(req, read));
        killed_by(&sa, deadline).await;
        sent.await.unwrap();
    }
    destroy_kills(sa, || emu.destroy_sandbox(&a)).await;
    drop(sb);
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "cloudflare")]
#[tokio::test]
async fn cloudflare_sandboxes_are_isolated_and_timeouts_kill() {
    use execseam_emulators::cloudflare::CloudflareEmulator;
    let dir = StateDir::new("cloudflare");
    let emu = CloudflareEmulator::start(dir.options()).await.unwrap();
    let exec = |id: &str, argv: &[&str], timeout_ms: Option<u64>| {
        let mut body = serde_json::json!({"argv": argv});
        if let Some(t) = timeout_ms {
            body["timeout_ms"] = t.into();
        }
        client()
            .post(format!("{}/v1/sandbox/{id}/exec", emu.base_url()))
            .bearer_auth(emu.token())
            .json(&body)
    };
    // Any well-formed id gets a sandbox on first use.
    for id in ["isolationaaaa", "isolationbbbb"] {
        send(exec(id, &["true"], None), true).await;
    }
    let (sa, sb) = (
        emu.sandbox("isolationaaaa").unwrap(),
        emu.sandbox("isolationbbbb").unwrap(),
    );
    isolated(&sa, &sb, 0, "isolationaaaa").await;
    for read in [false, true] {
        let deadline = Instant::now() + Duration::from_millis(1500);
        let sent = tokio::spawn(send(
            exec("isolationaaaa", &["sh", "-c", TIMED], Some(1500)),
            read,
        ));
        killed_by(&sa, deadline).await;
        sent.await.unwrap();
    }
    destroy_kills(sa, || assert!(emu.destroy_sandbox("isolationaaaa"))).await;
    drop(sb);
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "fly")]
#[tokio::test]
async fn fly_machines_are_isolated_and_timeouts_kill() {
    use execseam_emulators::fly::{FlyEmulator, FlyOptions};
    let dir = StateDir::new("fly");
    let emu = FlyEmulator::start_with(dir.options(), FlyOptions::default())
        .await
        .unwrap();
    let m = emu.default_machine();
    let other = emu.create_machine(m.app()).unwrap();
    let (sa, sb) = (m.sandbox().unwrap(), other.sandbox().unwrap());
    isolated(&sa, &sb, 0, m.id()).await;
    // exec with `timeout` (seconds): the Machine kills the command at the deadline.
    for read in [false, true] {
        let deadline = Instant::now() + Duration::from_secs(1);
        let req = client()
            .post(format!(
                "{}/v1/apps/{}/machines/{}/exec",
                emu.base_url(),
                m.app(),
                m.id()
            ))
            .bearer_auth(emu.token())
            .json(&serde_json::json!({"command": ["sh", "-c", TIMED], "timeout": 1}));
        let sent = tokio::spawn(send(req, read));
        killed_by(&sa, deadline).await;
        sent.await.unwrap();
    }
    destroy_kills(sa, || emu.stop_machine(&m)).await;
    drop((sb, other));
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "sprites")]
#[tokio::test]
async fn sprites_are_isolated_and_a_disconnected_command_is_killed() {
    use execseam_emulators::sprites::{SpritesEmulator, SpritesOptions};
    let dir = StateDir::new("sprites");
    let emu = SpritesEmulator::start_with(dir.options(), SpritesOptions::default())
        .await
        .unwrap();
    let (a, b) = (
        emu.create_sprite("isolation-a").unwrap(),
        emu.create_sprite("isolation-b").unwrap(),
    );
    isolated(a.sandbox(), b.sandbox(), 1001, "sprite").await;
    // A non-TTY exec keeps running `max_run_after_disconnect` after its client went away, then
    // is killed. (While a client is attached there is no deadline on Sprites.)
    let deadline = Instant::now() + Duration::from_secs(1);
    let req = client()
        .post(format!(
            "{}/v1/sprites/isolation-a/exec?cmd=sh&cmd=-c&cmd={}&max_run_after_disconnect=1s",
            emu.base_url(),
            urlencode(TIMED)
        ))
        .bearer_auth(emu.token());
    let sent = tokio::spawn(send(req, false));
    killed_by(a.sandbox(), deadline + Duration::from_millis(300)).await;
    sent.await.unwrap();
    let s = a.sandbox().clone();
    drop(a);
    destroy_kills(s, || assert!(emu.destroy_sprite("isolation-a"))).await;
    drop(b);
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "sprites")]
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(feature = "agentcore")]
#[tokio::test]
async fn agentcore_sessions_are_isolated() {
    use execseam_emulators::agentcore::AgentCoreEmulator;
    let dir = StateDir::new("agentcore");
    let emu = AgentCoreEmulator::start(dir.options()).await.unwrap();
    let a = emu.create_session(Duration::from_secs(600)).unwrap();
    let b = emu.create_session(Duration::from_secs(600)).unwrap();
    let (sa, sb) = (emu.sandbox(&a).unwrap(), emu.sandbox(&b).unwrap());
    isolated(&sa, &sb, 992, "localhost").await;
    // The service has no per-command timeout on the wire; a session's end kills its commands.
    destroy_kills(sa, || assert!(emu.terminate(&a))).await;
    drop(sb);
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "ax")]
#[tokio::test]
async fn ax_guests_are_isolated_and_timeouts_kill() {
    use execseam_ax_proto::StartProcessRequest;
    use execseam_ax_proto::process_service_client::ProcessServiceClient;
    use execseam_emulators::ax::AxEmulator;
    let dir = StateDir::new("ax");
    let emu = AxEmulator::start(dir.options()).await.unwrap();
    let other = emu.add_guest("isolation-b").unwrap();
    let (sa, sb) = (emu.primary().sandbox().clone(), other.sandbox().clone());
    isolated(&sa, &sb, 0, "localhost").await;
    // StartProcess with a timeout: the guest's tracker kills the group at the deadline; the
    // call itself returns at once, so "disconnecting" is the same as not waiting.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", emu.endpoint()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut procs = ProcessServiceClient::new(channel);
    let deadline = Instant::now() + Duration::from_secs(1);
    procs
        .start_process(StartProcessRequest {
            command: vec!["sh".into(), "-c".into(), TIMED.into()],
            timeout: Some(execseam_ax_proto::google::protobuf::Duration {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    killed_by(&sa, deadline).await;
    let guest = emu.primary().clone();
    destroy_kills(sa, move || guest.vanish()).await;
    // The client's connection keeps the emulator's state alive until it closes.
    drop((sb, other, procs));
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "vercel")]
#[tokio::test(flavor = "multi_thread")]
async fn vercel_sandboxes_are_isolated_and_timeouts_kill() {
    use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator, VercelOptions};
    let dir = StateDir::new("vercel");
    let emu = VercelEmulator::start_with(dir.options(), VercelOptions::default())
        .await
        .unwrap();
    let base = emu.base_url();
    for name in ["isolation-a", "isolation-b"] {
        let r = client()
            .post(format!("{base}/v3/sandboxes?teamId={TEAM_ID}"))
            .bearer_auth(emu.token())
            .json(&serde_json::json!({"projectId": PROJECT_ID, "name": name}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "create {name}: {}", r.status());
    }
    let (a, b) = (
        emu.sandbox("isolation-a").unwrap(),
        emu.sandbox("isolation-b").unwrap(),
    );
    // Commands run as `vercel-sandbox` (uid 1000 here); the hostname is the sandbox's name.
    isolated(&a.root(), &b.root(), 1000, "isolation-a").await;
    // `timeout` (ms) on POST …/cmd: the service's own SIGKILL timer, whether the client waits on
    // the NDJSON stream or goes away.
    let run = |ms: u64| {
        client()
            .post(format!(
                "{base}/v2/sandboxes/sessions/{}/cmd?teamId={TEAM_ID}",
                a.session_id()
            ))
            .bearer_auth(emu.token())
            .json(&serde_json::json!({
                "command": "sh", "args": ["-c", TIMED], "wait": true, "timeout": ms
            }))
    };
    for read in [false, true] {
        let deadline = Instant::now() + Duration::from_millis(1500);
        let sent = tokio::spawn(send(run(1500), read));
        killed_by(&a.root(), deadline).await;
        sent.await.unwrap();
    }
    // DELETE /v2/sandboxes/{name}: the sandbox and what runs in it are gone.
    let root = a.root().clone();
    drop(a);
    let delete = client()
        .delete(format!(
            "{base}/v2/sandboxes/isolation-a?teamId={TEAM_ID}&projectId={PROJECT_ID}"
        ))
        .bearer_auth(emu.token());
    destroy_kills(root, move || {
        tokio::task::block_in_place(|| {
            let r = tokio::runtime::Handle::current()
                .block_on(delete.send())
                .unwrap();
            assert!(r.status().is_success(), "delete: {}", r.status());
        })
    })
    .await;
    drop(b);
    drop(emu);
    dir.assert_empty().await;
}

#[cfg(feature = "northflank")]
#[tokio::test(flavor = "multi_thread")]
async fn northflank_containers_are_isolated_and_a_disconnected_command_is_killed() {
    use execseam_emulators::northflank::{
        Kind, NorthflankEmulator, NorthflankOptions, PROJECT_ID, SERVICE_ID,
    };
    let dir = StateDir::new("northflank");
    let emu = NorthflankEmulator::start_with(dir.options(), NorthflankOptions::default())
        .await
        .unwrap();
    let a = emu.entity(PROJECT_ID, Kind::Service, SERVICE_ID).unwrap();
    let b = emu.add_service(PROJECT_ID, "isolation-b").unwrap();
    // The image's user is root; the hostname is the instance (pod) name.
    isolated(a.sandbox(), b.sandbox(), 0, a.instance()).await;
    // The exec protocol has no deadline; a client that goes away has its command's group killed
    // (docs/adapters/northflank.md, "Not verified": Kubernetes would let it run).
    let url = format!(
        "{}/v1/command-exec/projects/{PROJECT_ID}/services/{SERVICE_ID}",
        emu.base_url().replacen("http://", "ws://", 1)
    );
    let init = serde_json::json!({"type": "init", "data": {
        "auth": {"type": "apiToken", "apiToken": emu.token()},
        "context": {"command": ["sh", "-c", TIMED], "shell": "none", "encoding": "utf-8", "tty": false}
    }})
    .to_string();
    let deadline = Instant::now() + Duration::from_secs(1);
    let sent = tokio::spawn(async move {
        use futures_util::SinkExt as _;
        let (mut ws, _) = tokio_websockets::ClientBuilder::from_uri(url.parse().unwrap())
            .connect()
            .await
            .unwrap();
        ws.send(tokio_websockets::Message::text(init))
            .await
            .unwrap();
        tokio::time::sleep_until(deadline.into()).await;
        drop(ws); // gone, without a close frame
    });
    killed_by(a.sandbox(), deadline + Duration::from_millis(300)).await;
    sent.await.unwrap();
    // A container ends with its service: here, with the emulator.
    let s = a.sandbox().clone();
    drop((a, b));
    destroy_kills(s, move || drop(emu)).await;
    dir.assert_empty().await;
}
