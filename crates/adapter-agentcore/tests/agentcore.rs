//! The adapter against the emulator: session lifecycle, no duplicate execution, every
//! AgentCore-specific fault, the files tools, raw-output mode; and against fixtures captured from
//! the real service (published notebook output) served verbatim.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_bedrockagentcore as ac;
use execseam_agentcore::{AgentCoreConfig, AgentCoreProvider, ExecMode};
use execseam_core::{
    Command, ErrorKind, Exec, Exit, Output, Retry, Sandbox, SandboxSpec, WireStatus,
};
use execseam_emulators::agentcore::eventstream;
use execseam_emulators::agentcore::{AgentCoreFault, Exception, SessionStatus};
use execseam_emulators::kit::Fault;
use execseam_test_util::exec::{assert_error, command, sh};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn the_adapter_starts_and_stops_its_session() {
    let emu = common::emulator().await;
    let exec = common::connect(&emu, common::config(&emu)).await;
    let sid = exec.id().to_owned();
    assert_eq!(emu.session_status(&sid), Some(SessionStatus::Ready));
    let out = exec
        .exec(sh("printf o; printf e >&2; exit 3"))
        .await
        .expect("a result");
    assert_eq!(out, Output::new("o", "e", Exit::Code(3)));
    exec.close().await.expect("stops");
    assert_eq!(emu.session_status(&sid), Some(SessionStatus::Terminated));
    let e = exec.exec(sh("true")).await.unwrap_err();
    assert_error(&e, ErrorKind::NotFound, Retry::Never);
    assert_eq!(e.status(), Some(WireStatus::Http(404)));
    assert_eq!(e.code(), Some("ResourceNotFoundException"));

    // An attached session is left alone by close().
    let sid2 = emu.create_session(Duration::from_secs(300)).unwrap();
    let attached = AgentCoreProvider::new(common::config(&emu))
        .unwrap()
        .connect(&sid2)
        .await
        .unwrap();
    attached.close().await.unwrap();
    assert_eq!(emu.session_status(&sid2), Some(SessionStatus::Ready));
}

async fn no_duplicate(mode: ExecMode) {
    let emu = common::emulator().await;
    let exec = common::connect(&emu, common::config(&emu).mode(mode)).await;
    let sid = exec.id().to_owned();
    let marker = emu.visible_path(&sid, "/tmp/ran").unwrap();
    let before = emu.count("exec");
    emu.faults().arm("exec", Fault::ServerError);
    let e = exec
        .exec(sh(&format!("echo x >> '{marker}'")))
        .await
        .unwrap_err();
    assert_error(&e, ErrorKind::Internal, Retry::Unsafe);
    assert_eq!(e.status(), Some(WireStatus::Http(500)));
    assert_eq!(
        emu.count("exec") - before,
        1,
        "{mode:?}: the invoke was re-sent"
    );
    if mode == ExecMode::Command {
        let ran = std::fs::read_to_string(emu.host_path(&sid, "/tmp/ran").unwrap()).unwrap();
        assert_eq!(ran, "x\n", "the command ran exactly once");
    }

    // Throttling is not retried by the SDK either (the adapter returns it, retry safe).
    let before = emu.count("exec");
    emu.faults().arm(
        "exec",
        Fault::RateLimited {
            retry_after_secs: 7,
        },
    );
    let e = exec.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited);
    assert_eq!(
        e.retry(),
        Retry::Safe {
            after: Some(Duration::from_secs(7))
        }
    );
    assert_eq!(emu.count("exec") - before, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_500_on_invoke_does_not_run_the_command_twice() {
    no_duplicate(ExecMode::Command).await;
    no_duplicate(ExecMode::Task).await;
}

/// The control for the test above: the SDK with its default retry policy re-sends
/// InvokeCodeInterpreter on a 500, and the command runs three times. If this ever stops being
/// true the trap is gone; until then the adapter must keep retries off.
#[tokio::test(flavor = "multi_thread")]
async fn control_the_sdk_default_retries_would_run_it_three_times() {
    let emu = common::emulator().await;
    let sid = emu.create_session(Duration::from_secs(300)).unwrap();
    let conf = ac::Config::builder()
        .behavior_version(ac::config::BehaviorVersion::latest())
        .region(ac::config::Region::new("us-east-1"))
        .credentials_provider(aws_credential_types::Credentials::from_keys(
            "AKIDTEST", "s", None,
        ))
        .endpoint_url(emu.base_url())
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    let client = ac::Client::from_conf(conf);
    emu.faults().add("exec=500@always".parse().unwrap());
    let marker = emu.visible_path(&sid, "/tmp/ran").unwrap();
    let r = client
        .invoke_code_interpreter()
        .code_interpreter_identifier("aws.codeinterpreter.v1")
        .session_id(&sid)
        .name(ac::types::ToolName::ExecuteCommand)
        .arguments(
            ac::types::ToolArguments::builder()
                .command(format!("echo x >> '{marker}'"))
                .build(),
        )
        .send()
        .await;
    assert!(r.is_err());
    emu.faults().clear();
    assert_eq!(emu.count("exec"), 3, "the SDK's default: 3 attempts");
    let ran = std::fs::read_to_string(emu.host_path(&sid, "/tmp/ran").unwrap()).unwrap();
    assert_eq!(ran, "x\nx\nx\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_agentcore_fault_is_a_typed_error() {
    let emu = common::emulator().await;
    let exec = common::connect(&emu, common::config(&emu)).await;
    let http = |e: Exception| AgentCoreFault::HttpException(e);
    let stream = |e: Exception| AgentCoreFault::StreamException(e);
    let table = [
        (
            http(Exception::Validation),
            ErrorKind::InvalidCommand,
            Retry::Never,
            Some(400),
        ),
        (
            http(Exception::ServiceQuotaExceeded),
            ErrorKind::RateLimited,
            Retry::SAFE,
            Some(402),
        ),
        (
            http(Exception::AccessDenied),
            ErrorKind::PermissionDenied,
            Retry::Never,
            Some(403),
        ),
        (
            http(Exception::ResourceNotFound),
            ErrorKind::NotFound,
            Retry::Never,
            Some(404),
        ),
        (
            http(Exception::Conflict),
            ErrorKind::Conflict,
            Retry::SAFE,
            Some(409),
        ),
        (
            http(Exception::Throttling),
            ErrorKind::RateLimited,
            Retry::SAFE,
            Some(429),
        ),
        (
            http(Exception::InternalServer),
            ErrorKind::Internal,
            Retry::Unsafe,
            Some(500),
        ),
        (
            stream(Exception::Validation),
            ErrorKind::InvalidCommand,
            Retry::Never,
            None,
        ),
        (
            stream(Exception::ServiceQuotaExceeded),
            ErrorKind::RateLimited,
            Retry::Unsafe,
            None,
        ),
        (
            stream(Exception::AccessDenied),
            ErrorKind::PermissionDenied,
            Retry::Never,
            None,
        ),
        (
            stream(Exception::ResourceNotFound),
            ErrorKind::NotFound,
            Retry::Never,
            None,
        ),
        (
            stream(Exception::Conflict),
            ErrorKind::Conflict,
            Retry::Unsafe,
            None,
        ),
        (
            stream(Exception::Throttling),
            ErrorKind::RateLimited,
            Retry::Unsafe,
            None,
        ),
        (
            stream(Exception::InternalServer),
            ErrorKind::Internal,
            Retry::Unsafe,
            None,
        ),
        (
            AgentCoreFault::UnknownException,
            ErrorKind::Protocol,
            Retry::Unsafe,
            None,
        ),
        (
            AgentCoreFault::ErrorFrame,
            ErrorKind::Protocol,
            Retry::Unsafe,
            None,
        ),
        (
            AgentCoreFault::BadPreludeCrc,
            ErrorKind::Protocol,
            Retry::Unsafe,
            None,
        ),
        (
            AgentCoreFault::BadMessageCrc,
            ErrorKind::Protocol,
            Retry::Unsafe,
            None,
        ),
        (
            AgentCoreFault::NoResult,
            ErrorKind::Protocol,
            Retry::Unsafe,
            None,
        ),
    ];
    for (fault, kind, retry, status) in table {
        let before = emu.count("exec");
        emu.arm("exec", fault);
        let e = exec.exec(sh("true")).await.unwrap_err();
        assert_eq!((e.kind(), e.retry()), (kind, retry), "{fault:?}: {e}");
        assert_eq!(e.status(), status.map(WireStatus::Http), "{fault:?}: {e}");
        assert_eq!(
            (e.provider(), e.operation()),
            ("agentcore", "exec"),
            "{fault:?}"
        );
        assert_eq!(emu.count("exec") - before, 1, "{fault:?} was re-sent");
    }
    // A result frame cut in half, then the connection.
    emu.faults().arm("exec", Fault::CutBeforeExit);
    let e = exec.exec(sh("true")).await.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Protocol | ErrorKind::Unavailable),
        "{e}"
    );
    assert_eq!(e.retry(), Retry::Unsafe);
    // And the adapter still works.
    let out = exec.exec(sh("printf fine")).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"fine");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_files_tools_round_trip_and_listings_are_sorted() {
    let emu = common::emulator().await;
    let exec = common::connect(&emu, common::config(&emu)).await;
    let root = exec.config().session_root_dir().to_owned();
    let all: Vec<u8> = (0..=255u8).collect();
    for name in ["c.txt", "a.bin", "b.txt"] {
        let data = if name.ends_with(".bin") {
            all.clone()
        } else {
            name.as_bytes().to_vec()
        };
        exec.write_file(&format!("{root}/dir/{name}"), data)
            .await
            .unwrap();
    }
    exec.write_file(&format!("{root}/dir/sub/x"), "x")
        .await
        .unwrap();
    assert_eq!(
        exec.read_file(&format!("{root}/dir/a.bin"))
            .await
            .unwrap()
            .as_ref(),
        &all[..]
    );
    let out = exec
        .exec(
            Command::builder(["cat", "c.txt", "b.txt"])
                .workdir(format!("{root}/dir"))
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout.as_ref(), b"c.txtb.txt");
    let list = exec.list_dir(&format!("{root}/dir")).await.unwrap();
    let names: Vec<_> = list.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.bin", "b.txt", "c.txt", "sub"]);
    assert!(list[3].is_dir && !list[0].is_dir);
    assert_eq!(list[0].size, Some(256));
    assert_eq!(list[0].path, format!("{root}/dir/a.bin"));

    // A file written by a command is read back by the tool, at the same absolute path.
    let tmp = emu.visible_path(exec.id(), "/tmp/from-cmd").unwrap();
    exec.exec(sh(&format!("printf 'by command' > '{tmp}'")))
        .await
        .unwrap();
    assert_eq!(exec.read_file(&tmp).await.unwrap().as_ref(), b"by command");

    exec.remove_files(&[&format!("{root}/dir/c.txt")])
        .await
        .unwrap();
    let e = exec
        .read_file(&format!("{root}/dir/c.txt"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = exec
        .write_file("/etc/execseam-nope", "x")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn raw_output_mode_reports_what_the_service_said() {
    let emu = common::emulator().await;
    let exec = common::connect(&emu, common::config(&emu).exact_output(false)).await;
    assert!(!exec.capabilities().binary_output);
    let out = exec
        .exec(sh("printf 'a\\nb\\n'; printf 'e\\n' >&2; exit 2"))
        .await
        .unwrap();
    // The emulator reproduces the service's pty line endings on stdout.
    assert_eq!(out, Output::new("a\r\nb\r\n", "e\n", Exit::Code(2)));
    let out = exec
        .exec(Command::builder(["cat"]).stdin("in").build().unwrap())
        .await
        .unwrap();
    assert_eq!(out.stdout.as_ref(), b"in");
    // The exact mode (default) gives the bytes the command wrote.
    let exact = common::connect(&emu, common::config(&emu)).await;
    let out = exact.exec(sh("printf 'a\\nb\\n'")).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"a\nb\n");
}

// ---------------------------------------------------------------------------------------------
// Fixtures captured from the real service (the output of a published notebook that ran
// bedrock_agentcore's CodeInterpreter against us-east-1), served verbatim.

const SID: &str = "01K1PPWYE373Z99SS2A8ABW0TX";

fn fixture(name: &str, call: usize) -> Value {
    match (name, call) {
        ("executeCommand", _) => json!({
            "content": [{"type": "text", "text": "Hello world!\r\n"}],
            "structuredContent": {"stdout": "Hello world!\r\n", "stderr": "", "exitCode": 0,
                                  "executionTime": 0.004979133605957031},
            "isError": false}),
        ("startCommandExecution", _) => json!({
            "content": [{"type": "text", "text": "Successfully started a command execution task"}],
            "structuredContent": {"taskId": "570c94a7-db4a-4b6e-ad7d-45fc722a3aee",
                                  "taskStatus": "submitted", "stdout": "", "stderr": ""},
            "isError": false}),
        // Captured: a working task's getTask has no taskId.
        ("getTask", 0) => json!({
            "content": [{"type": "text", "text": "Task is working"}],
            "structuredContent": {"taskStatus": "working", "stdout": "", "stderr": ""},
            "isError": false}),
        // Not captured: the completed shape follows the model's ToolResultStructuredContent.
        ("getTask", _) => json!({
            "content": [{"type": "text", "text": "complete\r\n"}],
            "structuredContent": {"taskId": "570c94a7-db4a-4b6e-ad7d-45fc722a3aee",
                                  "taskStatus": "completed", "stdout": "complete\r\n",
                                  "stderr": "", "exitCode": 0, "executionTime": 30.01},
            "isError": false}),
        ("stopTask", _) => json!({
            "content": [{"type": "text", "text": "Successfully canceled a command execution task"}],
            "isError": false}),
        // Captured: the resource has no `type` although the model requires one.
        ("readFiles", _) => json!({
            "content": [{"type": "resource", "resource": {"uri": "file:///data.txt",
                         "mimeType": "text/plain", "text": "pikachu"}}],
            "isError": false}),
        ("listFiles", _) => json!({
            "content": [
                {"type": "resource_link", "uri": "file:///log", "name": "log", "description": "Directory"},
                {"type": "resource_link", "mimeType": "text/plain", "uri": "file:///data.txt",
                 "name": "data.txt", "description": "File"},
                {"type": "resource_link", "uri": "file:///.ipython", "name": ".ipython", "description": "Directory"},
                {"type": "resource_link", "mimeType": "text/x-python", "uri": "file:///code.py",
                 "name": "code.py", "description": "File"}],
            "isError": false}),
        ("writeFiles", _) => json!({
            "content": [{"type": "text", "text": "Successfully wrote all 2 files"}],
            "isError": false}),
        (other, _) => panic!("no fixture for {other}"),
    }
}

/// A server that answers each tool with its fixture, framed as the service frames it.
async fn fixture_server(calls: Arc<Mutex<Vec<String>>>) -> execseam_emulators::Server {
    use axum::routing::{post, put};
    let seen = calls.clone();
    let router = axum::Router::new()
        .route(
            "/code-interpreters/{id}/sessions/start",
            put(|| async {
                axum::Json(
                    json!({"codeInterpreterIdentifier": "aws.codeinterpreter.v1",
                                  "sessionId": SID, "createdAt": "2025-08-01T12:00:00.123456Z"}),
                )
            }),
        )
        .route(
            "/code-interpreters/{id}/tools/invoke",
            post(move |body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let req: Value = serde_json::from_slice(&body).unwrap();
                    let name = req["name"].as_str().unwrap().to_owned();
                    let n = {
                        let mut s = seen.lock().unwrap();
                        let n = s.iter().filter(|x| **x == name).count();
                        s.push(name.clone());
                        n
                    };
                    let frame = eventstream::result_event(fixture(&name, n).to_string().as_bytes());
                    axum::response::Response::builder()
                        .header("content-type", "application/vnd.amazon.eventstream")
                        .header("x-amzn-code-interpreter-session-id", SID)
                        .body(axum::body::Body::from(frame))
                        .unwrap()
                }
            }),
        );
    execseam_emulators::Server::start("127.0.0.1:0".parse().unwrap(), router)
        .await
        .unwrap()
}

fn fixture_config(server: &execseam_emulators::Server) -> AgentCoreConfig {
    AgentCoreConfig::new("us-east-1", "AKIDTEST", "s")
        .endpoint_url(server.base_url())
        .exact_output(false)
        .poll_max(Duration::from_millis(20))
}

#[tokio::test(flavor = "multi_thread")]
async fn captured_service_results_are_read_as_they_are() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let server = fixture_server(calls.clone()).await;
    let exec = AgentCoreProvider::new(fixture_config(&server))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    assert_eq!(exec.id(), SID);
    let out = exec.exec(command(["echo", "Hello world!"])).await.unwrap();
    assert_eq!(out, Output::new("Hello world!\r\n", "", Exit::Code(0)));
    assert_eq!(
        exec.read_file("data.txt").await.unwrap().as_ref(),
        b"pikachu"
    );
    let names: Vec<_> = exec
        .list_dir("/opt/amazon/genesis1p-tools/var")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.is_dir))
        .collect();
    assert_eq!(
        names,
        [
            (".ipython".to_owned(), true),
            ("code.py".to_owned(), false),
            ("data.txt".to_owned(), false),
            ("log".to_owned(), true)
        ]
    );
    exec.write_file("data.txt", "pikachu").await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn captured_task_results_drive_the_task_mode() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let server = fixture_server(calls.clone()).await;
    let exec = AgentCoreProvider::new(fixture_config(&server).mode(ExecMode::Task))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let out = exec.exec(sh("sleep 30 && echo complete")).await.unwrap();
    assert_eq!(out, Output::new("complete\r\n", "", Exit::Code(0)));
    assert_eq!(
        *calls.lock().unwrap(),
        ["startCommandExecution", "getTask", "getTask"]
    );
}
