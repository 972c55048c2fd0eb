//! The router's wire behaviour through generated tonic clients, for what the official client's
//! run does not reach: offsets, idempotent starts, DEVNULL defaults, merged stderr, tokens.

use execseam_emulator_kit::EmulatorOptions;
use std::time::Duration;

use execseam_modal_proto::api::{self, modal_client_client::ModalClientClient};
use execseam_modal_proto::tcr::{self, task_command_router_client::TaskCommandRouterClient};
use tonic::transport::Channel;
use tonic::{Code, Request};

use super::*;

struct Fixture {
    emu: ModalEmulator,
    control: ModalClientClient<Channel>,
    router: TaskCommandRouterClient<Channel>,
    task_id: String,
    jwt: String,
    auth: String,
}

fn creds<T>(msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("x-modal-token-id", TOKEN_ID.parse().unwrap());
    r.metadata_mut()
        .insert("x-modal-token-secret", TOKEN_SECRET.parse().unwrap());
    r
}

impl Fixture {
    async fn new() -> Fixture {
        let emu = ModalEmulator::start(EmulatorOptions::default())
            .await
            .unwrap();
        let channel = Channel::from_shared(emu.url())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut control = ModalClientClient::new(channel.clone());
        let app_id = control
            .app_get_or_create(creds(api::AppGetOrCreateRequest {
                app_name: "t".into(),
                object_creation_type: api::ObjectCreationType::CreateIfMissing as i32,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner()
            .app_id;
        let auth = control
            .auth_token_get(creds(api::AuthTokenGetRequest {}))
            .await
            .unwrap()
            .into_inner()
            .token;
        let mut req = creds(api::SandboxCreateV2Request {
            app_id,
            definition: Some(api::Sandbox {
                timeout_secs: 60,
                ..Default::default()
            }),
            ..Default::default()
        });
        req.metadata_mut()
            .insert("x-modal-auth-token", auth.parse().unwrap());
        let created = control.sandbox_create_v2(req).await.unwrap().into_inner();
        let access = created.command_router_access.unwrap();
        assert_eq!(access.url, emu.url());
        Fixture {
            router: TaskCommandRouterClient::new(channel),
            control,
            task_id: created.task_id,
            jwt: access.jwt,
            auth,
            emu,
        }
    }

    fn bearer<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        r.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", self.jwt).parse().unwrap(),
        );
        r
    }

    async fn start(&mut self, exec_id: &str, argv: &[&str], stdout: i32, stderr: i32) {
        let req = self.bearer(tcr::TaskExecStartRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
            command_args: argv.iter().map(|s| s.to_string()).collect(),
            stdout_config: stdout,
            stderr_config: stderr,
            ..Default::default()
        });
        self.router.task_exec_start(req).await.unwrap();
    }

    /// [`start`](Self::start) of `sh -c script`.
    async fn sh(&mut self, exec_id: &str, script: &str, stdout: i32, stderr: i32) {
        self.start(exec_id, &["sh", "-c", script], stdout, stderr)
            .await;
    }

    async fn read(&mut self, exec_id: &str, fd: i32, offset: u64) -> Vec<u8> {
        let req = self.bearer(tcr::TaskExecStdioReadRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
            offset,
            file_descriptor: fd,
        });
        let mut s = self
            .router
            .task_exec_stdio_read(req)
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while let Some(m) = s.message().await.unwrap() {
            out.extend_from_slice(&m.data);
        }
        out
    }

    async fn wait(&mut self, exec_id: &str) -> ExitStatus {
        let req = self.bearer(tcr::TaskExecWaitRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
        });
        self.router
            .task_exec_wait(req)
            .await
            .unwrap()
            .into_inner()
            .exit_status
            .unwrap()
    }

    async fn stdin(&mut self, exec_id: &str, offset: u64, data: &[u8], eof: bool) -> Code {
        let req = self.bearer(tcr::TaskExecStdinWriteRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
            offset,
            data: data.to_vec().into(),
            eof,
        });
        match self.router.task_exec_stdin_write(req).await {
            Ok(_) => Code::Ok,
            Err(s) => s.code(),
        }
    }
}

const PIPE: i32 = 1;
const DEVNULL: i32 = 0;
const TO_STDOUT: i32 = 2;
use tcr::task_exec_wait_response::ExitStatus;

#[tokio::test(flavor = "multi_thread")]
async fn reads_replay_from_any_offset_and_stdio_configs_are_honoured() {
    let mut f = Fixture::new().await;
    f.sh("e1", "printf abcdef; printf XY >&2", PIPE, PIPE).await;
    assert_eq!(f.wait("e1").await, ExitStatus::Code(0));
    assert_eq!(f.read("e1", 0, 0).await, b"abcdef");
    assert_eq!(f.read("e1", 0, 4).await, b"ef", "from an offset");
    assert_eq!(f.read("e1", 1, 0).await, b"XY");
    // The proto3 defaults (0) discard the output.
    f.sh("e2", "printf out; printf err >&2", DEVNULL, DEVNULL)
        .await;
    f.wait("e2").await;
    assert_eq!(f.read("e2", 0, 0).await, b"");
    assert_eq!(f.read("e2", 1, 0).await, b"");
    // TASK_EXEC_STDERR_CONFIG_STDOUT merges stderr into stdout.
    f.sh("e3", "printf a; printf b >&2", PIPE, TO_STDOUT).await;
    f.wait("e3").await;
    let mut merged = f.read("e3", 0, 0).await;
    merged.sort_unstable();
    assert_eq!(merged, b"ab");
    assert_eq!(f.read("e3", 1, 0).await, b"");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_is_idempotent_on_its_exec_id() {
    let mut f = Fixture::new().await;
    f.sh("same", "echo x >> /tmp/n; cat /tmp/n", PIPE, PIPE)
        .await;
    f.sh("same", "echo x >> /tmp/n; cat /tmp/n", PIPE, PIPE)
        .await;
    assert_eq!(f.wait("same").await, ExitStatus::Code(0));
    assert_eq!(f.read("same", 0, 0).await, b"x\n");
    let sb = f.emu.sandboxes().pop().unwrap();
    assert_eq!(sb.exec_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_is_offset_addressed() {
    let mut f = Fixture::new().await;
    f.start("cat", &["cat"], PIPE, PIPE).await;
    assert_eq!(f.stdin("cat", 0, b"hello ", false).await, Code::Ok);
    // A retry of the same write (and an overlapping one) adds nothing twice.
    assert_eq!(f.stdin("cat", 0, b"hello ", false).await, Code::Ok);
    assert_eq!(f.stdin("cat", 3, b"lo world", false).await, Code::Ok);
    // A gap is refused.
    assert_eq!(f.stdin("cat", 100, b"x", false).await, Code::OutOfRange);
    assert_eq!(f.stdin("cat", 11, b"", true).await, Code::Ok);
    assert_eq!(f.wait("cat").await, ExitStatus::Code(0));
    assert_eq!(f.read("cat", 0, 0).await, b"hello world");
    // After EOF (and after the exit) a new write is FAILED_PRECONDITION (ConflictError).
    assert_eq!(
        f.stdin("cat", 11, b"more", false).await,
        Code::FailedPrecondition
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn signals_timeouts_and_tokens() {
    let mut f = Fixture::new().await;
    f.sh("sig", "kill -TERM $$", PIPE, PIPE).await;
    assert_eq!(f.wait("sig").await, ExitStatus::Signal(15));
    let req = f.bearer(tcr::TaskExecStartRequest {
        task_id: f.task_id.clone(),
        exec_id: "slow".into(),
        command_args: vec!["sleep".into(), "30".into()],
        timeout_secs: Some(1),
        ..Default::default()
    });
    f.router.task_exec_start(req).await.unwrap();
    let t = std::time::Instant::now();
    assert_eq!(
        f.wait("slow").await,
        ExitStatus::Signal(9),
        "killed at timeout_secs"
    );
    assert!(t.elapsed() < Duration::from_secs(5));

    // A router JWT is only good for its task; a missing one is UNAUTHENTICATED.
    let mut req = Request::new(tcr::TaskExecPollRequest {
        task_id: f.task_id.clone(),
        exec_id: "sig".into(),
    });
    req.metadata_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    let e = f.router.task_exec_poll(req).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    // V2 control calls need the auth token.
    let e = f
        .control
        .sandbox_list_v2(creds(api::SandboxListRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let mut ok = creds(api::SandboxListRequest::default());
    ok.metadata_mut()
        .insert("x-modal-auth-token", f.auth.parse().unwrap());
    assert_eq!(
        f.control
            .sandbox_list_v2(ok)
            .await
            .unwrap()
            .into_inner()
            .sandboxes
            .len(),
        1
    );
    // An exec the task never ran is NOT_FOUND.
    let e = f
        .router
        .task_exec_stdin_status(f.bearer(tcr::TaskExecStdinStatusRequest {
            task_id: f.task_id.clone(),
            exec_id: "nope".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_carries_modals_retry_policy() {
    let mut f = Fixture::new().await;
    f.emu.faults().arm(
        "exec",
        Fault::RateLimited {
            retry_after_secs: 3,
        },
    );
    let req = f.bearer(tcr::TaskExecStartRequest {
        task_id: f.task_id.clone(),
        exec_id: "r".into(),
        command_args: vec!["true".into()],
        ..Default::default()
    });
    let e = f.router.task_exec_start(req).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    let status = api::RpcStatus::decode(e.details()).unwrap();
    assert_eq!(status.details.len(), 1);
    assert_eq!(
        status.details[0].type_url,
        "type.modal.com/modal.client.RPCRetryPolicy"
    );
    let policy = api::RpcRetryPolicy::decode(status.details[0].value.as_ref()).unwrap();
    assert_eq!(policy.retry_after_secs, 3.0);
}
