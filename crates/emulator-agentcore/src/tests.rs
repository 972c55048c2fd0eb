//! Raw-HTTP checks of the emulator. The official clients are the real proof (the Rust SDK in the
//! adapter's tests, boto3 in `tests/interop_agentcore.rs`); these pin the bytes.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::eventstream::{self, Message};
use super::{AgentCoreEmulator, AgentCoreFault, DEFAULT_IDENTIFIER, SessionStatus};
use execseam_emulator_kit::EmulatorOptions;
use execseam_emulator_kit::Fault;

const AUTH: &str = "AWS4-HMAC-SHA256 Credential=AKIDTEST/20250101/us-east-1/bedrock-agentcore/aws4_request, SignedHeaders=host, Signature=00";

struct Raw {
    http: reqwest::Client,
    base: String,
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Result<Vec<u8>, String>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(self.body.as_ref().expect("a body")).expect("json")
    }
    fn messages(&self) -> Vec<Message> {
        eventstream::decode(self.body.as_ref().expect("a body")).expect("valid frames")
    }
    fn result(&self) -> Value {
        let m = self.messages();
        assert_eq!(m.len(), 1, "one message");
        assert_eq!(m[0].header(":message-type"), Some("event"));
        assert_eq!(m[0].header(":event-type"), Some("result"));
        serde_json::from_slice(&m[0].payload).expect("result json")
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Raw {
    fn new(emu: &AgentCoreEmulator) -> Raw {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Raw {
            http: reqwest::Client::new(),
            base: format!("{}/code-interpreters/{DEFAULT_IDENTIFIER}", emu.base_url()),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        session: Option<&str>,
        auth: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        if let Some(s) = session {
            req = req.header("x-amzn-code-interpreter-session-id", s);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("a response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| e.to_string());
        Reply {
            status,
            headers,
            body,
        }
    }

    /// A signed request outside a session.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.send(method, path, None, Some(AUTH), body).await
    }

    async fn start(&self) -> String {
        let r = self
            .send(
                Method::PUT,
                "/sessions/start",
                None,
                Some(AUTH),
                Some(json!({ "name": "t", "sessionTimeoutSeconds": 300, "clientToken": uuid_token() })),
            )
            .await;
        assert_eq!(r.status, 200);
        r.json()["sessionId"].as_str().unwrap().to_owned()
    }

    /// `executeCommand` with `command`.
    async fn exec(&self, sid: &str, command: &str) -> Reply {
        self.invoke(sid, "executeCommand", json!({ "command": command }))
            .await
    }

    async fn invoke(&self, sid: &str, tool: &str, args: Value) -> Reply {
        self.send(
            Method::POST,
            "/tools/invoke",
            Some(sid),
            Some(AUTH),
            Some(json!({ "name": tool, "arguments": args, "someFutureField": 1 })),
        )
        .await
    }
}

fn uuid_token() -> String {
    format!("{}-token", super::wire::uuid())
}

async fn emulator() -> AgentCoreEmulator {
    AgentCoreEmulator::start(EmulatorOptions::default())
        .await
        .unwrap()
}

/// An emulator, a client of it, and a session started on it.
async fn session() -> (AgentCoreEmulator, Raw, String) {
    let emu = emulator().await;
    let raw = Raw::new(&emu);
    let sid = raw.start().await;
    (emu, raw, sid)
}

#[tokio::test]
async fn a_session_runs_commands_and_ends() {
    let (emu, raw, sid) = session().await;
    assert_eq!(sid.len(), 26);
    let r = raw
        .call(Method::GET, &format!("/sessions/get?sessionId={sid}"), None)
        .await;
    assert_eq!(r.json()["status"], "READY");
    assert_eq!(r.json()["sessionTimeoutSeconds"], 300);

    let r = raw
        .exec(&sid, "echo hi; echo err >&2; pwd; echo $HOME $USER; exit 3")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.amazon.eventstream")
    );
    assert_eq!(
        r.header("x-amzn-code-interpreter-session-id"),
        Some(sid.as_str())
    );
    let v = r.result();
    let sc = &v["structuredContent"];
    let root = emu.visible_path(&sid, super::SESSION_ROOT).unwrap();
    assert_eq!(
        sc["stdout"],
        format!("hi\r\n{root}\r\n{root} genesis1ptools\r\n").as_str()
    );
    assert_eq!(sc["stderr"], "err\n");
    assert_eq!(sc["exitCode"], 3);
    assert!(sc["executionTime"].as_f64().unwrap() < 30.0);
    assert_eq!(v["isError"], true);
    assert_eq!(v["content"][0]["type"], "text");

    let r = raw
        .call(
            Method::PUT,
            &format!("/sessions/stop?sessionId={sid}"),
            Some(json!({"clientToken": uuid_token()})),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.json()["lastUpdatedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(emu.session_status(&sid), Some(SessionStatus::Terminated));
    let r = raw.exec(&sid, "true").await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.header("x-amzn-errortype"),
        Some("ResourceNotFoundException")
    );
    assert!(r.json()["message"].as_str().is_some());
}

#[tokio::test]
async fn credentials_are_required_but_signatures_are_not_checked() {
    let emu = emulator().await;
    let raw = Raw::new(&emu);
    let r = raw
        .send(Method::PUT, "/sessions/start", None, None, Some(json!({})))
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-amzn-errortype"),
        Some("MissingAuthenticationTokenException")
    );
    let emu = AgentCoreEmulator::start(EmulatorOptions::with_token("AKIDRIGHT"))
        .await
        .unwrap();
    let raw = Raw::new(&emu);
    let r = raw
        .call(Method::PUT, "/sessions/start", Some(json!({})))
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-amzn-errortype"),
        Some("UnrecognizedClientException")
    );
}

#[tokio::test]
async fn files_and_commands_share_the_session_directory() {
    let (emu, raw, sid) = session().await;
    let r = raw
        .invoke(
            &sid,
            "writeFiles",
            json!({ "content": [
                { "path": "data.txt", "text": "pikachu" },
                { "path": "sub/bin.dat", "blob": "AP+A" },
            ]}),
        )
        .await;
    let v = r.result();
    assert_eq!(v["isError"], false);
    assert_eq!(v["content"][0]["text"], "Successfully wrote all 2 files");
    let r = raw
        .exec(&sid, "cat data.txt; od -An -tx1 sub/bin.dat")
        .await;
    assert_eq!(
        r.result()["structuredContent"]["stdout"],
        "pikachu 00 ff 80\r\n"
    );

    let r = raw
        .invoke(
            &sid,
            "readFiles",
            json!({ "paths": ["data.txt", "sub/bin.dat"] }),
        )
        .await;
    let v = r.result();
    assert_eq!(v["content"][0]["type"], "resource");
    assert_eq!(v["content"][0]["resource"]["uri"], "file:///data.txt");
    assert_eq!(v["content"][0]["resource"]["text"], "pikachu");
    assert_eq!(v["content"][1]["resource"]["blob"], "AP+A");

    let r = raw
        .exec(&sid, "mkdir d && printf x > d/f && printf y > /tmp/t")
        .await;
    assert_eq!(r.result()["structuredContent"]["exitCode"], 0);
    let r = raw
        .invoke(&sid, "listFiles", json!({ "directoryPath": "" }))
        .await;
    let v = r.result();
    let mut names: Vec<&str> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert_eq!(b["type"], "resource_link");
            b["name"].as_str().unwrap()
        })
        .collect();
    names.sort_unstable();
    // A fresh session directory is not empty on the service (SESSION_DIR_ENTRIES, from a real
    // listing in the research note's correction); ours come on top.
    let mut want: Vec<&str> = super::SESSION_DIR_ENTRIES.to_vec();
    want.extend(["d", "data.txt", "sub"]);
    want.sort_unstable();
    assert_eq!(names, want);
    let r = raw
        .invoke(&sid, "readFiles", json!({ "paths": ["/tmp/t"] }))
        .await;
    assert_eq!(r.result()["content"][0]["resource"]["text"], "y");
    let r = raw
        .invoke(&sid, "readFiles", json!({ "paths": ["nope"] }))
        .await;
    assert_eq!(r.result()["isError"], true);
    let r = raw
        .invoke(
            &sid,
            "writeFiles",
            json!({ "content": [{ "path": "/etc/execseam-x", "text": "no" }] }),
        )
        .await;
    assert_eq!(r.result()["isError"], true);
    let r = raw
        .invoke(&sid, "removeFiles", json!({ "paths": ["data.txt"] }))
        .await;
    assert_eq!(r.result()["isError"], false);
    assert!(!emu.host_path(&sid, "data.txt").unwrap().exists());
}

#[tokio::test]
async fn tasks_run_report_and_stop() {
    let (emu, raw, sid) = session().await;
    let r = raw
        .invoke(
            &sid,
            "startCommandExecution",
            json!({ "command": "sleep 0.3; echo done; exit 4" }),
        )
        .await;
    let v = r.result();
    assert_eq!(v["structuredContent"]["taskStatus"], "submitted");
    let task = v["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = raw.invoke(&sid, "getTask", json!({ "taskId": task })).await;
    assert_eq!(r.result()["structuredContent"]["taskStatus"], "working");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let v = raw
        .invoke(&sid, "getTask", json!({ "taskId": task }))
        .await
        .result();
    assert_eq!(v["structuredContent"]["taskStatus"], "failed");
    assert_eq!(v["structuredContent"]["exitCode"], 4);
    assert_eq!(v["structuredContent"]["stdout"], "done\r\n");

    let v = raw
        .invoke(
            &sid,
            "startCommandExecution",
            json!({ "command": "echo $$ > /tmp/pid; exec sleep 60" }),
        )
        .await
        .result();
    let task = v["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid: u32 = std::fs::read_to_string(emu.host_path(&sid, "/tmp/pid").unwrap())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Checked from the host, by the process's host pid.
    let pid = emu.sandbox(&sid).unwrap().host_pid(pid).expect("running");
    let v = raw
        .invoke(&sid, "stopTask", json!({ "taskId": task }))
        .await
        .result();
    assert_eq!(
        v["content"][0]["text"],
        "Successfully canceled a command execution task"
    );
    let v = raw
        .invoke(&sid, "getTask", json!({ "taskId": task }))
        .await
        .result();
    assert_eq!(v["structuredContent"]["taskStatus"], "canceled");
    let mut gone = false;
    for _ in 0..50 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "stopTask must kill the process");
}

#[tokio::test]
async fn faults_are_rendered_in_the_wire_format() {
    let (emu, raw, sid) = session().await;
    let echo = "echo x >> /tmp/count";

    emu.faults().arm(
        "exec",
        Fault::RateLimited {
            retry_after_secs: 7,
        },
    );
    let r = raw.exec(&sid, echo).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.header("x-amzn-errortype"), Some("ThrottlingException"));

    emu.arm(
        "exec",
        AgentCoreFault::HttpException(super::Exception::ServiceQuotaExceeded),
    );
    let r = raw.exec(&sid, echo).await;
    assert_eq!(r.status, 402);
    assert_eq!(
        r.header("x-amzn-errortype"),
        Some("ServiceQuotaExceededException")
    );

    emu.faults().arm("exec", Fault::ServerError);
    let r = raw.exec(&sid, echo).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.header("x-amzn-errortype"),
        Some("InternalServerException")
    );
    // It ran once (a 500 after the command ran).
    let count = std::fs::read_to_string(emu.host_path(&sid, "/tmp/count").unwrap()).unwrap();
    assert_eq!(count, "x\n");

    // The frames do not decode.
    for (fault, error) in [
        (AgentCoreFault::BadMessageCrc, "message CRC"),
        (AgentCoreFault::BadPreludeCrc, "prelude CRC"),
    ] {
        emu.arm("exec", fault);
        let r = raw.exec(&sid, "true").await;
        let e = eventstream::decode(r.body.as_ref().unwrap()).unwrap_err();
        assert!(e.contains(error), "{e}");
    }

    // The first frame is an error or an exception.
    for (fault, message_type, header, value) in [
        (
            AgentCoreFault::ErrorFrame,
            "error",
            ":error-code",
            "InternalFailure",
        ),
        (
            AgentCoreFault::StreamException(super::Exception::Throttling),
            "exception",
            ":exception-type",
            "throttlingException",
        ),
    ] {
        emu.arm("exec", fault);
        let m = raw.exec(&sid, "true").await.messages();
        assert_eq!(m[0].header(":message-type"), Some(message_type));
        assert_eq!(m[0].header(header), Some(value));
    }

    emu.arm("exec", AgentCoreFault::NoResult);
    let r = raw.exec(&sid, "true").await;
    assert_eq!((r.status, r.body.as_ref().unwrap().len()), (200, 0));

    emu.faults().arm("exec", Fault::CutBeforeExit);
    let r = raw.exec(&sid, "true").await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_err(), "the body must fail: {:?}", r.body);

    emu.faults().arm("exec", Fault::MalformedBody);
    let m = raw.exec(&sid, "true").await.messages();
    assert!(serde_json::from_slice::<Value>(&m[0].payload).is_err());

    emu.faults().arm("exec", Fault::SandboxVanishes);
    let m = raw.exec(&sid, "sleep 5").await.messages();
    assert_eq!(
        m[0].header(":exception-type"),
        Some("resourceNotFoundException")
    );
    assert_eq!(emu.session_status(&sid), Some(SessionStatus::Terminated));
    // Every invocation above submitted a command: all were counted on `exec`.
    assert_eq!(emu.count("exec"), 11);
}

#[tokio::test]
async fn sessions_expire() {
    let emu = emulator().await;
    let raw = Raw::new(&emu);
    let r = raw
        .call(
            Method::PUT,
            "/sessions/start",
            Some(json!({ "sessionTimeoutSeconds": 1 })),
        )
        .await;
    let sid = r.json()["sessionId"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r = raw.exec(&sid, "true").await;
    assert_eq!(r.status, 404);
    let r = raw
        .call(Method::POST, "/sessions/list", Some(json!({})))
        .await;
    assert_eq!(r.json()["items"][0]["status"], "TERMINATED");
}
