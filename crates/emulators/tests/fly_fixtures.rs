//! The Fly Machines emulator against request and response shapes taken from the Machines API's
//! own sources. Fly publishes no official Python or JS client, so these literal fixtures are the
//! proof that the emulator speaks the API:
//!
//! - [spec] the Machines OpenAPI spec (docs.machines.dev, as generated clients carry it):
//!   `MachineExecRequest {cmd (deprecated), command: string[], container, stdin, timeout}`,
//!   `flydv1.ExecResponse {stdout, stderr, exit_code, exit_signal}` (all optional),
//!   `ErrorResponse {error, status, details}`, operation `Machines_exec` (200 and 400).
//! - [fly-go] superfly/fly-go @ 22d6e51, `machine_types.go`: `MachineExecRequest {container,
//!   machine, cmd, stdin, timeout}` (all `omitempty`, no `command`), `MachineExecResponse
//!   {exit_code, stdout, stderr}` (`omitempty`); `flaps/flaps.go` `handleAPIError` reads
//!   `{"error","message"}`; `tokens/tokens.go` sends `FlyV1 <macaroons>` or `Bearer <token>`.
//! - [docs] superfly/docs @ 5c22c8ce: `blueprints/warm-pool-user-machines` (exec with `command`
//!   argv; "returns HTTP 200 even when the command inside failed"), `machines-resource` and the
//!   `_machines_*` request/response examples (start, wait, lease).
//! - [obs] the 409 lease body a Fly user quoted on community.fly.io (`{"status":"error",
//!   "message":"machine ID … lease currently held …"}`), flyctl issue #4194's
//!   `deadline_exceeded` text, and a 2026 report of the output-limit error text.

use std::time::Duration;

use execseam_emulators::EmulatorOptions;
use execseam_emulators::fly::{FlyEmulator, FlyOptions, TimeoutMode};
use serde_json::{Value, json};

async fn emulator(opts: FlyOptions) -> FlyEmulator {
    let _ = rustls::crypto::ring::default_provider().install_default();
    FlyEmulator::start(
        EmulatorOptions {
            token: Some("fm2_lJPECAAAAAAAAMx6xBDH".into()),
            ..EmulatorOptions::default()
        },
        opts,
    )
    .await
    .expect("the emulator starts")
}

struct Api {
    http: reqwest::Client,
    base: String,
    app: String,
    id: String,
    auth: String,
}

impl Api {
    fn new(emu: &FlyEmulator) -> Api {
        let m = emu.default_machine();
        Api {
            http: reqwest::Client::new(),
            base: emu.base_url(),
            app: m.app().to_owned(),
            id: m.id().to_owned(),
            // fly-go's FlapsHeader for a macaroon token.
            auth: "FlyV1 fm2_lJPECAAAAAAAAMx6xBDH".into(),
        }
    }

    fn url(&self, suffix: &str) -> String {
        format!(
            "{}/v1/apps/{}/machines/{}{suffix}",
            self.base, self.app, self.id
        )
    }

    async fn call(
        &self,
        method: reqwest::Method,
        suffix: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, String, Value) {
        let mut r = self
            .http
            .request(method, self.url(suffix))
            .header("authorization", &self.auth);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        let resp = r.send().await.expect("a response");
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = resp.text().await.expect("a body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, ctype, json)
    }

    async fn exec(&self, body: &str) -> (u16, String, Value) {
        self.call(reqwest::Method::POST, "/exec", Some(body), &[])
            .await
    }
}

/// Every key is one of `flydv1.ExecResponse`'s, with its spec type.
fn assert_exec_response_schema(v: &Value) {
    let obj = v.as_object().expect("an object");
    for (k, val) in obj {
        match k.as_str() {
            "stdout" | "stderr" => assert!(val.is_string(), "{k}: {val}"),
            "exit_code" | "exit_signal" => assert!(val.is_i64(), "{k}: {val}"),
            other => panic!("{other} is not a field of flydv1.ExecResponse: {v}"),
        }
    }
}

/// fly-go's `MachineExecResponse` decoding: missing fields are zero values.
fn fly_go_decode(v: &Value) -> (i64, String, String) {
    (
        v["exit_code"].as_i64().unwrap_or(0),
        v["stdout"].as_str().unwrap_or_default().to_owned(),
        v["stderr"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_answers_the_spec_shapes() {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);

    // [docs] blueprint: `{"command": ["curl","--fail",…]}`; here a command every image has.
    let (status, ctype, v) = api
        .exec(r#"{"command": ["sh", "-c", "echo hello; echo oops >&2; exit 3"], "timeout": 30}"#)
        .await;
    assert_eq!(status, 200, "[docs] 200 even when the command failed: {v}");
    assert_eq!(ctype, "application/json");
    assert_exec_response_schema(&v);
    assert_eq!(
        v,
        json!({"stdout": "hello\n", "stderr": "oops\n", "exit_code": 3})
    );

    // Zero values omitted (protobuf JSON): a silent success is `{}`; fly-go decodes it to zeros.
    let (status, _, v) = api.exec(r#"{"command": ["true"]}"#).await;
    assert_eq!((status, &v), (200, &json!({})));
    assert_eq!(fly_go_decode(&v), (0, String::new(), String::new()));

    // [fly-go] the deprecated `cmd` string, as flyctl sends it (`Cmd: "bash -c \"…\""`), with
    // fly-go's `omitempty` fields.
    let (status, _, v) = api
        .exec(r#"{"cmd":"sh -c \"printf '%s' \\\"$FLY_APP_NAME\\\"\"","timeout":5}"#)
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(fly_go_decode(&v), (0, api.app.clone(), String::new()));

    // [spec] `stdin` is the whole of stdin as one string.
    let (_, _, v) = api
        .exec(r#"{"command": ["cat"], "stdin": "héllo\nwörld"}"#)
        .await;
    assert_eq!(v, json!({"stdout": "héllo\nwörld"}));
    // Absent stdin is EOF at once.
    let (_, _, v) = api.exec(r#"{"command": ["wc", "-c"]}"#).await;
    assert_eq!(v["stdout"], "0\n");

    // `exit_signal` (fly-go drops it): a signal death.
    let (_, _, v) = api.exec(r#"{"command": ["sh", "-c", "kill -9 $$"]}"#).await;
    assert_eq!(v, json!({"exit_code": -1, "exit_signal": 9}));

    // Strings are JSON: invalid UTF-8 becomes U+FFFD, as Go's encoder writes it.
    let (_, _, v) = api.exec(r#"{"command": ["printf", "a\\377b"]}"#).await;
    assert_eq!(v["stdout"], "a\u{FFFD}b");

    // Unknown request fields are tolerated (`container`, `machine` from 2026 fly-go).
    let (status, _, _) = api
        .exec(r#"{"command": ["true"], "container": "app", "machine": false, "future": 1}"#)
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_field_is_present_without_omit_empty() {
    let emu = emulator(FlyOptions {
        omit_empty: false,
        ..FlyOptions::default()
    })
    .await;
    let api = Api::new(&emu);
    let (_, _, v) = api.exec(r#"{"command": ["true"]}"#).await;
    assert_exec_response_schema(&v);
    assert_eq!(
        v,
        json!({"stdout": "", "stderr": "", "exit_code": 0, "exit_signal": 0}),
        "the spec's example shape"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_use_the_error_response_shapes() {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);

    // [spec] ErrorResponse: {"error": string}; fly-go reads `error` (or `message`).
    let mut other = Api::new(&emu);
    other.id = "3d8d413b29d089".into();
    let (status, ctype, v) = other.exec(r#"{"command": ["true"]}"#).await;
    assert_eq!((status, ctype.as_str()), (404, "application/json"));
    assert!(
        v["error"].as_str().unwrap().contains("machine not found"),
        "{v}"
    );

    let mut bad = Api::new(&emu);
    bad.auth = "Bearer wrong".into();
    let (status, _, v) = bad.exec(r#"{"command": ["true"]}"#).await;
    assert_eq!(status, 401);
    assert!(v["error"].is_string(), "{v}");
    // `Bearer FlyV1 <macaroon>` (the docs paste `fly tokens` output after `Bearer`) is accepted.
    bad.auth = "Bearer FlyV1 fm2_lJPECAAAAAAAAMx6xBDH".into();
    assert_eq!(bad.exec(r#"{"command": ["true"]}"#).await.0, 200);

    let (status, _, v) = api.exec(r#"{"timeout": 3}"#).await;
    assert_eq!(status, 400, "neither command nor cmd");
    assert!(v["error"].is_string());
    let (status, _, _) = api.exec("not json").await;
    assert_eq!(status, 400);

    // [obs] flyctl#4194: a command that outlives `timeout` is `deadline_exceeded: …`.
    let (status, _, v) = api
        .exec(r#"{"command": ["sleep", "5"], "timeout": 1}"#)
        .await;
    assert_eq!(status, 408);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("deadline_exceeded: "),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_command_can_also_end_with_its_signal() {
    let emu = emulator(FlyOptions {
        timeout_mode: TimeoutMode::Signal,
        ..FlyOptions::default()
    })
    .await;
    let api = Api::new(&emu);
    let (status, _, v) = api
        .exec(r#"{"command": ["sh", "-c", "echo started; exec sleep 5"], "timeout": 1}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"stdout": "started\n", "exit_code": -1, "exit_signal": 9})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_output_limit_is_the_apis_error() {
    let emu = emulator(FlyOptions {
        max_response_bytes: 1000,
        ..FlyOptions::default()
    })
    .await;
    let api = Api::new(&emu);
    let (status, _, v) = api
        .exec(r#"{"command": ["sh", "-c", "head -c 2000 /dev/zero | tr '\\0' x"]}"#)
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        v["error"],
        "exec output exceeds the maximum allowed response size after JSON encoding (1000 byte limit)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_and_leases_follow_the_docs_examples() {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;

    let (status, _, m) = api.call(get.clone(), "", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        (m["id"].as_str(), m["state"].as_str()),
        (Some(api.id.as_str()), Some("started"))
    );
    assert!(m["instance_id"].is_string() && m["config"].is_object() && m["region"].is_string());

    // Exec on a machine that is not started is refused.
    emu.stop_machine(&emu.default_machine());
    let (status, _, v) = api.exec(r#"{"command": ["true"]}"#).await;
    assert_eq!(status, 412, "{v}");

    // [docs] _machines_start_resp: {"previous_state":"stopped","migrated":false,"new_host":""}.
    let (status, _, v) = api.call(post.clone(), "/start", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"previous_state": "stopped", "migrated": false, "new_host": ""})
    );
    // [docs] wait: 200 {"ok": true}; timeout outside [1, 60] is invalid_argument.
    let (status, _, v) = api
        .call(get.clone(), "/wait?state=started&timeout=10", None, &[])
        .await;
    assert_eq!((status, v), (200, json!({"ok": true})));
    let (status, _, _) = api
        .call(get.clone(), "/wait?state=started&timeout=61", None, &[])
        .await;
    assert_eq!(status, 400);
    // Waiting for a state that does not come is 408.
    let (status, _, _) = api
        .call(get.clone(), "/wait?state=suspended&timeout=1", None, &[])
        .await;
    assert_eq!(status, 408);
    assert_eq!(api.exec(r#"{"command": ["true"]}"#).await.0, 200);

    // [docs] _machines_lease_create_resp: 201 {"status":"success","data":{nonce,expires_at,owner,
    // description,version}}; body {"description":"","ttl":500}.
    let (status, _, lease) = api
        .call(
            post.clone(),
            "/lease",
            Some(r#"{"description":"","ttl":500}"#),
            &[],
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(lease["status"], "success");
    let data = lease["data"].as_object().unwrap();
    let mut keys: Vec<_> = data.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["description", "expires_at", "nonce", "owner", "version"]
    );
    let nonce = lease["data"]["nonce"].as_str().unwrap().to_owned();

    // [obs] with someone's lease held, a request without the nonce is a 409 {"status":"error",…}.
    let (status, _, v) = api.exec(r#"{"command": ["true"]}"#).await;
    assert_eq!(status, 409);
    assert_eq!(v["status"], "error");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("lease currently held"),
        "{v}"
    );
    // The holder passes its nonce.
    let with_nonce = [("fly-machine-lease-nonce", nonce.as_str())];
    let (status, _, _) = api
        .call(
            post.clone(),
            "/exec",
            Some(r#"{"command":["true"]}"#),
            &with_nonce,
        )
        .await;
    assert_eq!(status, 200);
    // [docs] _machines_lease_release_resp: {"status":"success","data":{"ok":true}}.
    let (status, _, v) = api
        .call(reqwest::Method::DELETE, "/lease", None, &with_nonce)
        .await;
    assert_eq!(
        (status, v),
        (200, json!({"status": "success", "data": {"ok": true}}))
    );
    assert_eq!(api.exec(r#"{"command": ["true"]}"#).await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn machines_are_isolated_and_stopping_kills_their_commands() {
    let emu = emulator(FlyOptions {
        default_timeout: Duration::from_secs(60),
        ..FlyOptions::default()
    })
    .await;
    let a = Api::new(&emu);
    let m2 = emu.create_machine("execseam-emulated").unwrap();
    let mut b = Api::new(&emu);
    b.id = m2.id().to_owned();
    a.exec(r#"{"command": ["sh", "-c", "echo a > /tmp/who"]}"#)
        .await;
    let (_, _, v) = b
        .exec(r#"{"command": ["sh", "-c", "cat /tmp/who 2>/dev/null || echo none"]}"#)
        .await;
    assert_eq!(v["stdout"], "none\n", "machines do not share /tmp");
    let (_, _, v) = b
        .exec(r#"{"command": ["sh", "-c", "echo $HOME $FLY_MACHINE_ID"]}"#)
        .await;
    assert_eq!(v["stdout"], format!("/root {}\n", m2.id()));

    // A command running while its machine stops is killed (its answer is an error).
    let slow = tokio::spawn(async move { b.exec(r#"{"command": ["sleep", "30"]}"#).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    emu.stop_machine(&m2);
    let (status, _, _) = slow.await.unwrap();
    assert_ne!(status, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
}
