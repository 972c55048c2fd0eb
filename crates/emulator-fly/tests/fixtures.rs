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
//! - [spec-2023] superfly/fly-openapi-sdk @ f0c59fb `go/api/openapi.yaml` (the Machines API
//!   OpenAPI 3.0.1 snapshot, `servers: https://api.machines.dev/v1`): operations `Apps_list`
//!   (`org_slug` required; `ListAppsResponse {apps, total_apps}`), `Apps_create` (201),
//!   `Apps_show` (`App {id, name, organization, status}`), `Apps_delete` (202),
//!   `Machines_update` (`UpdateMachineRequest` → `Machine`), `Machines_restart` (`timeout` "as a
//!   Go duration string or number of seconds"), `Machines_signal` (`SignalRequest {signal}`,
//!   an enum of names), `Machines_list_processes` (`ProcessStat[]`, `sort_by`, `order`),
//!   `Machines_list_events` (`MachineEvent[]`), `Machines_show_metadata`,
//!   `Machines_update_metadata` and `Machines_delete_metadata` (204), `Machines_wait`.
//! - [fly-go-apps] superfly/fly-go @ 22d6e51 `flaps/flaps_apps.go` (`CreateApp` posts
//!   `{name, org_slug, network, app_role_id}` to `/apps?wait=true`; `ListApps` reads
//!   `{"apps": […]}`; `GetApp`; `DeleteApp`) and `flaps/flaps_apps_test.go` (an unknown app is
//!   `404 {"error":"app not found"}`); `flaps/flaps_error.go` (`status: "name_taken"`).
//! - [fly-go-machines] the same commit's `flaps/flaps_machines.go`: `Update` (POST `/{id}`,
//!   nonce header), `Restart` (`/{id}/restart?force_stop=%t&timeout=…&signal=…`, nonce),
//!   `Kill` (POST `/{id}/signal` with `{"signal": 9}`, no nonce), `GetProcesses` (GET `/ps`),
//!   `SetMetadata` (`{"value": …}`), `GetMetadata`, `DeleteMetadata`, `AcquireLease`
//!   (`?ttl=N`, no body), `RefreshLease` (same with the nonce), `ReleaseLease`, `Stop`, `Start`,
//!   `Suspend`, `Destroy` (`?kill=%t`, nonce); `flaps/flaps_machines_wait.go` (`state`
//!   repeated, `timeout` in seconds, `version`, `from_event_id`); `machine_types.go`
//!   (`MachineEvent`, `MachineExitEvent`, `ProcessStat`, `MachineInit {exec, entrypoint, cmd}`).
//! - [docs-apps] superfly/docs @ 5c22c8ce `machines/api/apps-resource.html.markerb` (create
//!   201 `{"id","created_at"}`, `app_name`/`org_slug`; get `{id,name,status,organization}`;
//!   delete 202 with no body, `?force=true`; list `{total_apps, apps:[{id,name,machine_count,
//!   volume_count,network}]}`), `reference/machines/_delete_app_resp.erb` (`{"error": "Could not
//!   find App"}`), `_machines_metadata_*` (`{"value":"bar"}`, "no body"), and
//!   `machines-resource.html.markerb` (wait states `started`, `stopped`, `suspended`,
//!   `destroyed`; stop's `signal` "default: SIGINT").
//! - [obs] the 409 lease body a Fly user quoted on community.fly.io (`{"status":"error",
//!   "message":"machine ID … lease currently held …"}`), flyctl issue #4194's
//!   `deadline_exceeded` text, and a 2026 report of the output-limit error text.

use std::time::Duration;

use execseam_emulator_fly::{FlyEmulator, FlyOptions, TimeoutMode};
use execseam_emulator_kit::EmulatorOptions;
use reqwest::Method;
use serde_json::{Value, json};

async fn emulator(opts: FlyOptions) -> FlyEmulator {
    let _ = rustls::crypto::ring::default_provider().install_default();
    FlyEmulator::start_with(
        EmulatorOptions::with_token("fm2_lJPECAAAAAAAAMx6xBDH"),
        opts,
    )
    .await
    .expect("the emulator starts")
}

/// The status, the content type and the body of an answer.
type Reply = (u16, String, Value);

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
        method: Method,
        suffix: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut r = self.http.request(method, self.url(suffix));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        self.send(r, body).await
    }

    /// POST `body` to the machine's `suffix`.
    async fn post(&self, suffix: &str, body: &str) -> Reply {
        self.call(Method::POST, suffix, Some(body), &[]).await
    }

    /// GET the machine's `suffix`.
    async fn get(&self, suffix: &str) -> Reply {
        self.call(Method::GET, suffix, None, &[]).await
    }

    /// A request to `path` under the base URL (`/v1/apps…`).
    async fn raw(&self, method: Method, path: &str, body: Option<&str>) -> Reply {
        let url = format!("{}{path}", self.base);
        self.send(self.http.request(method, url), body).await
    }

    /// Sends `r` with the token (and `body` as JSON): the status, the content type, and the body
    /// as JSON (a string when it is not JSON, `Null` only when it is empty).
    async fn send(&self, r: reqwest::RequestBuilder, body: Option<&str>) -> Reply {
        let mut r = r.header("authorization", &self.auth);
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
        // `Null` only for an empty body.
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, ctype, json)
    }

    async fn exec(&self, body: &str) -> Reply {
        self.post("/exec", body).await
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

    let (status, _, m) = api.get("").await;
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
    let (status, _, v) = api.call(Method::POST, "/start", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"previous_state": "stopped", "migrated": false, "new_host": ""})
    );
    // [docs] wait: 200 {"ok": true}; timeout outside [1, 60] is invalid_argument.
    let (status, _, v) = api.get("/wait?state=started&timeout=10").await;
    assert_eq!((status, v), (200, json!({"ok": true})));
    let (status, _, _) = api.get("/wait?state=started&timeout=61").await;
    assert_eq!(status, 400);
    // Waiting for a state that does not come is 408.
    let (status, _, _) = api.get("/wait?state=suspended&timeout=1").await;
    assert_eq!(status, 408);
    assert_eq!(api.exec(r#"{"command": ["true"]}"#).await.0, 200);

    // [docs] _machines_lease_create_resp: 201 {"status":"success","data":{nonce,expires_at,owner,
    // description,version}}; body {"description":"","ttl":500}.
    let (status, _, lease) = api.post("/lease", r#"{"description":"","ttl":500}"#).await;
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
            Method::POST,
            "/exec",
            Some(r#"{"command":["true"]}"#),
            &with_nonce,
        )
        .await;
    assert_eq!(status, 200);
    // [docs] _machines_lease_release_resp: {"status":"success","data":{"ok":true}}.
    let (status, _, v) = api.call(Method::DELETE, "/lease", None, &with_nonce).await;
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

fn app_api(emu: &FlyEmulator, app: &str, id: &str) -> Api {
    let mut a = Api::new(emu);
    a.app = app.to_owned();
    a.id = id.to_owned();
    a
}

/// Creates a machine over the API (`POST /v1/apps/{app}/machines`) and returns its id.
async fn launch(api: &Api, body: Value) -> String {
    let (status, _, m) = api
        .raw(
            Method::POST,
            &format!("/v1/apps/{}/machines", api.app),
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(status, 200, "{m}");
    m["id"].as_str().expect("an id").to_owned()
}

/// An emulator, its default machine's API, and the API of a machine launched in its app from
/// `body`.
async fn launched(body: Value) -> (FlyEmulator, Api, Api) {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);
    let id = launch(&api, body).await;
    let m = app_api(&emu, &api.app, &id);
    (emu, api, m)
}

/// Polls `ps` until `f` holds (the main process starts in the background of a boot).
async fn ps_until(api: &Api, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    for _ in 0..100 {
        let (status, _, v) = api.get("/ps").await;
        assert_eq!(status, 200, "{v}");
        let list = v.as_array().expect("[spec] ProcessStat[]").clone();
        if f(&list) {
            return list;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("ps never matched");
}

fn commands(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|p| p["command"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_apps_api_creates_lists_shows_and_deletes_apps() {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);

    // [fly-go-apps] an unknown app is 404 {"error":"app not found"}, and creating a machine in
    // it does not create it.
    let (status, _, v) = api.raw(Method::GET, "/v1/apps/fresh-app", None).await;
    assert_eq!((status, v), (404, json!({"error": "app not found"})));
    let (status, _, v) = api
        .raw(
            Method::POST,
            "/v1/apps/fresh-app/machines",
            Some(r#"{"config":{"image":"debian"}}"#),
        )
        .await;
    assert_eq!((status, v), (404, json!({"error": "app not found"})));
    assert_eq!(
        api.raw(Method::GET, "/v1/apps/fresh-app/machines", None)
            .await
            .0,
        404
    );
    assert_eq!(
        api.raw(Method::GET, "/v1/apps/fresh-app", None).await.0,
        404
    );
    let ghost = app_api(&emu, "fresh-app", "3d8d413b29d089");
    assert_eq!(
        ghost.exec(r#"{"command":["true"]}"#).await.2,
        json!({"error": "app not found"})
    );

    // [docs-apps] POST /v1/apps {"app_name","org_slug"} → 201 {"id","created_at"}.
    let fresh_app = r#"{"app_name": "fresh-app", "org_slug": "personal"}"#;
    let (status, ctype, v) = api.raw(Method::POST, "/v1/apps", Some(fresh_app)).await;
    assert_eq!((status, ctype.as_str()), (201, "application/json"), "{v}");
    let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["created_at", "id"]);
    let app_id = v["id"].as_str().unwrap().to_owned();
    assert!(
        v["created_at"].as_i64().unwrap() > 1_700_000_000_000,
        "ms: {v}"
    );
    // [fly-go-apps] fly-go's CreateAppRequest names the field `name` and adds `?wait=true`.
    let (status, _, _) = api
        .raw(
            Method::POST,
            "/v1/apps?wait=true",
            Some(r#"{"name":"second-app","org_slug":"personal","network":"","app_role_id":""}"#),
        )
        .await;
    assert_eq!(status, 201);
    // A taken name: fly-go's `name_taken` status.
    let (status, _, v) = api.raw(Method::POST, "/v1/apps", Some(fresh_app)).await;
    assert!(status >= 400, "{status}");
    assert_eq!(v["status"], "name_taken", "{v}");
    // No name, or no org: 400 ErrorResponse.
    for body in [
        r#"{"org_slug":"personal"}"#,
        r#"{"app_name":"x-app"}"#,
        "nope",
    ] {
        let (status, _, v) = api.raw(Method::POST, "/v1/apps", Some(body)).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].is_string());
    }

    // [docs-apps] GET /v1/apps/{app} → {id, name, status, organization{name, slug}}.
    let (status, _, v) = api.raw(Method::GET, "/v1/apps/fresh-app", None).await;
    assert_eq!(status, 200);
    assert_eq!(v["id"], app_id.as_str());
    assert_eq!(v["name"], "fresh-app");
    assert!(v["status"].is_string());
    assert_eq!(v["organization"]["slug"], "personal");
    assert!(v["organization"]["name"].is_string());

    // The new app takes machines; [docs-apps] list shows the count.
    let fresh = app_api(&emu, "fresh-app", "");
    let id = launch(&fresh, json!({"config": {"image": "debian"}})).await;
    let fresh = app_api(&emu, "fresh-app", &id);
    assert_eq!(fresh.exec(r#"{"command":["true"]}"#).await.0, 200);
    let (status, _, v) = api
        .raw(Method::GET, "/v1/apps?org_slug=personal", None)
        .await;
    assert_eq!(status, 200);
    let apps = v["apps"].as_array().expect("apps");
    assert_eq!(v["total_apps"], apps.len());
    let mine = apps
        .iter()
        .find(|a| a["name"] == "fresh-app")
        .expect("listed");
    assert_eq!(mine["machine_count"], 1);
    assert_eq!(mine["id"], app_id.as_str());
    for k in ["volume_count", "network"] {
        assert!(mine.get(k).is_some(), "{k}: {mine}");
    }
    let names: Vec<_> = apps.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"execseam-emulated") && names.contains(&"second-app"));
    // [spec-2023] Apps_list: `org_slug` is required; another org's list is empty.
    assert_eq!(api.raw(Method::GET, "/v1/apps", None).await.0, 400);
    let (_, _, v) = api
        .raw(Method::GET, "/v1/apps?org_slug=other-org", None)
        .await;
    assert_eq!(v, json!({"total_apps": 0, "apps": []}));

    // [docs-apps] "Machines should be stopped before attempting deletion. Append ?force=true
    // to the URI to stop and delete immediately."; 202 with no body.
    let (status, _, _) = api.raw(Method::DELETE, "/v1/apps/fresh-app", None).await;
    assert!(
        status >= 400,
        "a started machine refuses the delete: {status}"
    );
    let (status, _, v) = api
        .raw(Method::DELETE, "/v1/apps/fresh-app?force=true", None)
        .await;
    assert_eq!((status, v), (202, Value::Null));
    assert_eq!(
        api.raw(Method::GET, "/v1/apps/fresh-app", None).await.0,
        404
    );
    assert_eq!(fresh.exec(r#"{"command":["true"]}"#).await.0, 404);
    assert!(
        emu.machine("fresh-app", &id).is_none(),
        "its machines are gone"
    );
    // [docs-apps] `_delete_app_resp`: {"error": "Could not find App"}.
    let (status, _, v) = api.raw(Method::DELETE, "/v1/apps/fresh-app", None).await;
    assert_eq!((status, v), (404, json!({"error": "Could not find App"})));
}

#[tokio::test(flavor = "multi_thread")]
async fn update_replaces_the_config_and_reboots_the_machine() {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);
    let (_, _, before) = api.get("").await;
    api.exec(r#"{"command":["sh","-c","echo old > /data/f"]}"#)
        .await;

    // [docs] `_machines_update_req`: {"config": {"image", "guest", "env": {"APP_ENV": …}}}.
    let body = json!({"config": {
        "image": "flyio/fastify-functions",
        "guest": {"memory_mb": 512, "cpus": 2, "cpu_kind": "shared"},
        "env": {"APP_ENV": "production"},
    }});
    let (status, _, m) = api.post("", &body.to_string()).await;
    assert_eq!(status, 200, "[spec-2023] Machines_update → Machine: {m}");
    assert_eq!(m["id"], api.id.as_str());
    assert_eq!(m["config"]["env"], json!({"APP_ENV": "production"}));
    assert_eq!(m["config"]["image"], "flyio/fastify-functions");
    assert_eq!(m["config"]["guest"]["memory_mb"], 512);
    assert_ne!(m["version"], before["version"], "a new version");
    assert_ne!(m["instance_id"], before["instance_id"]);
    // The machine runs on the new config, on a fresh root.
    let (_, _, v) = api
        .exec(r#"{"command":["sh","-c","echo $APP_ENV; cat /data/f 2>/dev/null || echo gone"]}"#)
        .await;
    assert_eq!(v["stdout"], "production\ngone\n");
    let (_, _, after) = api.get("").await;
    assert_eq!(after["state"], "started");
    assert!(
        after["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "update"),
        "{after}"
    );

    // Fly staff (community.fly.io/t/15555): a `current_version` that does not match is 409.
    let stale = json!({"config": {"image": "debian"}, "current_version": before["version"]});
    let (status, _, v) = api.post("", &stale.to_string()).await;
    assert_eq!(status, 409, "{v}");
    let current = json!({"config": {"image": "debian"}, "current_version": after["version"]});
    assert_eq!(api.post("", &current.to_string()).await.0, 200);
    // [spec-2023] 400 ErrorResponse for a body that is not an UpdateMachineRequest.
    let (status, _, v) = api.post("", "[1]").await;
    assert_eq!(status, 400);
    assert!(v["error"].is_string());
    // Another app's path is the app's 404.
    let other = app_api(&emu, "no-such-app", &api.id);
    assert_eq!(other.post("", &body.to_string()).await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn signal_reaches_the_machines_processes() {
    let emu = emulator(FlyOptions::default()).await;
    let api = Api::new(&emu);
    // [fly-go-machines] `MachineInit.exec`: the machine's main process; it records the signal.
    let id = launch(
        &api,
        json!({"config": {"image": "debian", "init": {"exec": [
            "sh", "-c",
            "trap 'echo usr1 >> /data/got' USR1; trap 'exit 7' TERM; while :; do sleep 0.05; done"
        ]}}}),
    )
    .await;
    let m = app_api(&emu, &api.app, &id);
    ps_until(&m, |l| {
        commands(l).iter().any(|c| c.starts_with("sh -c trap"))
    })
    .await;

    // [spec-2023] SignalRequest {"signal": "SIGUSR1"} (a name of its enum).
    let (status, _, _) = m.post("/signal", r#"{"signal":"SIGUSR1"}"#).await;
    assert_eq!(status, 200);
    let mut got = Value::Null;
    for _ in 0..100 {
        got = m.exec(r#"{"command":["cat","/data/got"]}"#).await.2;
        if got["stdout"] == "usr1\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got["stdout"], "usr1\n", "the trap ran: {got}");

    // Unknown signals are 400 ErrorResponse.
    let (status, _, v) = m.post("/signal", r#"{"signal":"SIGNOPE"}"#).await;
    assert_eq!(status, 400);
    assert!(v["error"].is_string());

    // [spec-2023] SIGTERM ends it (its trap exits 7): the events record the exit.
    let (status, _, _) = m.post("/signal", r#"{"signal":"SIGTERM"}"#).await;
    assert_eq!(status, 200);
    let mut exit = Value::Null;
    for _ in 0..100 {
        let (_, _, ev) = m.get("/events").await;
        if let Some(e) = ev.as_array().unwrap().iter().find(|e| e["type"] == "exit") {
            exit = e.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // [fly-go-machines] MachineEvent.request.exit_event.exit_code.
    assert_eq!(exit["request"]["exit_event"]["exit_code"], 7, "{exit}");

    // [fly-go-machines] `Kill`: {"signal": 9}, a number; a detached command dies of it.
    m.exec(r#"{"command":["sh","-c","setsid sleep 300 >/dev/null 2>&1 < /dev/null &"]}"#)
        .await;
    ps_until(&m, |l| commands(l).contains(&"sleep 300".to_owned())).await;
    let (status, _, _) = m.post("/signal", r#"{"signal": 9}"#).await;
    assert_eq!(status, 200);
    ps_until(&m, |l| !commands(l).contains(&"sleep 300".to_owned())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ps_lists_the_processes_and_restart_restarts_them() {
    let (_emu, api, m) = launched(
        json!({"config": {"image": "debian", "init": {"entrypoint": ["sleep"], "cmd": ["600"]}}}),
    )
    .await;
    let list = ps_until(&m, |l| commands(l).contains(&"sleep 600".to_owned())).await;
    // [spec-2023] ProcessStat: exactly these fields, with these types.
    for p in &list {
        let mut keys: Vec<_> = p.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "command",
                "cpu",
                "directory",
                "listen_sockets",
                "pid",
                "rss",
                "rtime",
                "stime"
            ],
            "{p}"
        );
        for k in ["pid", "cpu", "rss", "rtime", "stime"] {
            assert!(p[k].is_u64(), "{k}: {p}");
        }
        assert!(p["listen_sockets"].is_array());
    }
    let main = list
        .iter()
        .find(|p| p["command"] == "sleep 600")
        .unwrap()
        .clone();
    // pid 1 is there; nothing of the emulator's own (its state directory) shows.
    assert!(list.iter().any(|p| p["pid"] == 1), "{list:?}");
    assert!(
        !commands(&list).iter().any(|c| c.contains("execseam")),
        "{list:?}"
    );
    assert!(main["pid"].as_u64().unwrap() > 1);
    assert!(main["rss"].as_u64().unwrap() > 0);
    // A command exec'd into the machine shows up while it runs.
    m.exec(r#"{"command":["sh","-c","setsid sleep 301 >/dev/null 2>&1 < /dev/null &"]}"#)
        .await;
    ps_until(&m, |l| commands(l).contains(&"sleep 301".to_owned())).await;
    // [spec-2023] sort_by and order.
    let (status, _, v) = m.get("/ps?sort_by=pid&order=desc").await;
    assert_eq!(status, 200);
    let pids: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(pids.windows(2).all(|w| w[0] >= w[1]), "{pids:?}");

    // [fly-go-machines] Restart: `/{id}/restart?force_stop=false&timeout=5s&signal=SIGTERM`.
    let (status, _, _) = m
        .call(
            Method::POST,
            "/restart?force_stop=false&timeout=5s&signal=SIGTERM",
            None,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let (_, _, machine) = m.get("").await;
    assert_eq!(machine["state"], "started");
    // The main process runs again, a new one (started later); the exec'd one is gone.
    let after = ps_until(&m, |l| commands(l).contains(&"sleep 600".to_owned())).await;
    assert!(
        !commands(&after).contains(&"sleep 301".to_owned()),
        "{after:?}"
    );
    let again = after.iter().find(|p| p["command"] == "sleep 600").unwrap();
    assert!(
        again["stime"].as_u64().unwrap() > main["stime"].as_u64().unwrap(),
        "{main} then {again}"
    );
    let (_, _, ev) = m.get("/events").await;
    let kinds: Vec<_> = ev
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.contains(&"restart".to_owned()), "{kinds:?}");
    // The old main process died of the SIGTERM.
    let exit = ev
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "exit")
        .expect("an exit");
    assert_eq!(exit["request"]["exit_event"]["signal"], 15, "{exit}");
    // A bad timeout is 400; a stopped machine cannot restart.
    let (status, _, _) = m
        .call(Method::POST, "/restart?timeout=soon", None, &[])
        .await;
    assert_eq!(status, 400);
    assert_eq!(api.get("/ps?sort_by=nope").await.0, 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_and_events_follow_the_spec() {
    let (emu, api, m) =
        launched(json!({"config": {"image": "debian", "metadata": {"fly_process_group": "app"}}}))
            .await;
    let (status, _, v) = m.get("/metadata").await;
    assert_eq!((status, v), (200, json!({"fly_process_group": "app"})));
    // [docs-apps] `_machines_metadata_update_req`: POST …/metadata/foo-key {"value":"bar"};
    // [spec-2023] 204 No Content.
    let (status, _, v) = m.post("/metadata/foo-key", r#"{"value":"bar"}"#).await;
    assert_eq!((status, v), (204, Value::Null));
    let (_, _, v) = m.get("/metadata").await;
    assert_eq!(v, json!({"fly_process_group": "app", "foo-key": "bar"}));
    let (_, _, machine) = m.get("").await;
    assert_eq!(machine["config"]["metadata"]["foo-key"], "bar");
    // [spec-2023] Machines_update_metadata 400.
    let (status, _, v) = m.post("/metadata/foo-key", "{}").await;
    assert_eq!(status, 400);
    assert!(v["error"].is_string());
    let (status, _, v) = m.call(Method::DELETE, "/metadata/foo-key", None, &[]).await;
    assert_eq!((status, v), (204, Value::Null));
    let (_, _, v) = m.get("/metadata").await;
    assert_eq!(v, json!({"fly_process_group": "app"}));

    // [spec-2023] Machines_list_events: MachineEvent {id, request, source, status, timestamp,
    // type}; newest first.
    emu.stop_machine(&emu.machine(&api.app, &m.id).unwrap());
    let (status, _, ev) = m.get("/events").await;
    assert_eq!(status, 200);
    let ev = ev.as_array().unwrap();
    for e in ev {
        for (k, val) in e.as_object().unwrap() {
            match k.as_str() {
                "id" | "source" | "status" | "type" => assert!(val.is_string(), "{e}"),
                "timestamp" => assert!(val.is_i64(), "{e}"),
                "request" => assert!(val.is_object(), "{e}"),
                other => panic!("{other} is not a MachineEvent field: {e}"),
            }
        }
        assert!(
            e["timestamp"].as_i64().unwrap() > 1_700_000_000_000,
            "ms: {e}"
        );
    }
    let kinds: Vec<_> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"stop"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"launch"), "{kinds:?}");
    assert!(kinds.contains(&"start"));
    let ts: Vec<i64> = ev
        .iter()
        .map(|e| e["timestamp"].as_i64().unwrap())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] >= w[1]), "{ts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_states_and_lease_enforcement() {
    let (emu, api, m) = launched(json!({"config": {"image": "debian"}})).await;
    let (_, _, machine) = m.get("").await;
    let instance = machine["instance_id"].as_str().unwrap().to_owned();

    // [fly-go-machines] AcquireLease: POST …/lease?ttl=N with no body.
    let (status, _, lease) = m.call(Method::POST, "/lease?ttl=30", None, &[]).await;
    assert!(status == 200 || status == 201, "{status}: {lease}");
    let nonce = lease["data"]["nonce"].as_str().unwrap().to_owned();
    let with = [("fly-machine-lease-nonce", nonce.as_str())];
    // A second acquirer gets 409 (fly-go retries on 409).
    assert_eq!(
        m.call(Method::POST, "/lease?ttl=30", None, &[]).await.0,
        409
    );
    // [fly-go-machines] RefreshLease: the same POST with the nonce.
    let (status, _, v) = m.call(Method::POST, "/lease?ttl=30", None, &with).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["nonce"], nonce.as_str());
    // [fly-go-machines] Update, Restart, Stop, Start, Suspend and Destroy send the nonce: without
    // it they are refused while the lease is held.
    let update = r#"{"config":{"image":"debian","env":{"V":"2"}}}"#;
    for (method, suffix, body) in [
        (Method::POST, "", Some(update)),
        (Method::POST, "/restart?force_stop=true", None),
        (Method::POST, "/stop", None),
        (Method::POST, "/suspend", None),
        (Method::POST, "/start", None),
        (Method::DELETE, "?kill=true", None),
    ] {
        let (status, _, v) = m.call(method, suffix, body, &[]).await;
        assert_eq!(status, 409, "{suffix}: {v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap_or_default()
                .contains("lease currently held"),
            "{v}"
        );
    }
    // The holder's calls pass.
    assert_eq!(m.call(Method::POST, "", Some(update), &with).await.0, 200);
    assert_eq!(
        m.call(Method::POST, "/restart?force_stop=true", None, &with)
            .await
            .0,
        200
    );
    let (_, _, v) = m
        .call(
            Method::POST,
            "/exec",
            Some(r#"{"command":["sh","-c","echo $V"]}"#),
            &with,
        )
        .await;
    assert_eq!(v["stdout"], "2\n");

    // [docs] wait states: started, stopped (needs instance_id), suspended, destroyed; [fly-go]
    // repeats `state`; timeout in seconds; 408 when the state does not come.
    let (_, _, machine) = m.get("").await;
    let instance2 = machine["instance_id"].as_str().unwrap().to_owned();
    assert_ne!(instance, instance2);
    let (status, _, v) = m
        .get(&format!(
            "/wait?state=started&state=stopped&instance_id={instance2}&timeout=5"
        ))
        .await;
    assert_eq!((status, v), (200, json!({"ok": true})));
    assert_eq!(
        m.get("/wait?state=stopped&timeout=1").await.0,
        400,
        "stopped needs instance_id"
    );
    assert_eq!(m.call(Method::POST, "/suspend", None, &with).await.0, 200);
    let (status, _, _) = m.get("/wait?state=suspended&timeout=10").await;
    assert_eq!(status, 200);
    // [docs suspend-resume] suspend saves memory and processes and nothing runs meanwhile: the
    // sandbox is frozen (in namespaces; the freezer needs them), kept, and thawed by start.
    let sandbox = || emu.machine(&api.app, &m.id).unwrap().sandbox().unwrap();
    if execseam_emulator_kit::Isolation::detect() == execseam_emulator_kit::Isolation::Namespaces {
        assert!(
            sandbox().is_paused(),
            "a suspended machine's sandbox is frozen"
        );
    }
    assert_eq!(m.call(Method::POST, "/start", None, &with).await.0, 200);
    assert_eq!(m.get("/wait?state=started&timeout=10").await.0, 200);
    assert!(!sandbox().is_paused(), "start resumes a suspended machine");
    assert_eq!(
        m.call(
            Method::POST,
            "/stop",
            Some(r#"{"signal":"SIGTERM","timeout":"5s"}"#),
            &with
        )
        .await
        .0,
        200
    );
    let (status, _, _) = m
        .get(&format!(
            "/wait?state=stopped&instance_id={instance2}&timeout=10"
        ))
        .await;
    assert_eq!(status, 200);
    let (status, _, v) = m.get("/wait?state=started&timeout=1").await;
    assert_eq!(status, 408, "{v}");
    assert!(v["error"].is_string());

    // [docs] release with the nonce; then anyone may destroy, and a wait for `destroyed` after
    // the fact answers at once.
    let (status, _, _) = m.call(Method::DELETE, "/lease", None, &with).await;
    assert_eq!(status, 200);
    assert_eq!(m.call(Method::DELETE, "?kill=true", None, &[]).await.0, 200);
    let (status, _, v) = m.get("/wait?state=destroyed&timeout=5").await;
    assert_eq!((status, v), (200, json!({"ok": true})));

    // A lease that expires stops being enforced.
    let id = launch(&api, json!({"config": {"image": "debian"}})).await;
    let m = app_api(&emu, &api.app, &id);
    assert!(m.call(Method::POST, "/lease?ttl=1", None, &[]).await.0 < 300);
    assert_eq!(m.call(Method::POST, "/stop", None, &[]).await.0, 409);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(m.call(Method::POST, "/stop", None, &[]).await.0, 200);
}
