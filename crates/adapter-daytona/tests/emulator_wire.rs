//! The emulator's wire details that the official SDK does not exercise but Daytona clients depend
//! on: the answer shapes chosen by `X-Daytona-SDK-Version`, status codes with empty bodies, the
//! error envelope, the bulk-download multipart framing.

use execseam_emulators::EmulatorOptions;
use execseam_emulators::daytona::DaytonaEmulator;
use serde_json::Value;

struct Api {
    http: reqwest::Client,
    toolbox: String,
    token: String,
}

impl Api {
    /// An emulator, and a sandbox created in it.
    async fn start() -> (DaytonaEmulator, Api) {
        let emu = DaytonaEmulator::start(EmulatorOptions::default())
            .await
            .unwrap();
        let api = Api::new(&emu).await;
        (emu, api)
    }

    async fn new(emu: &DaytonaEmulator) -> Api {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let token = emu.token().to_owned();
        let resp = http
            .post(format!("{}/sandbox", emu.api_url()))
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .body(r#"{"env": {}, "labels": {"code-toolbox-language": "python"}, "volumes": []}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "create answers 200, not 201");
        let dto: Value = resp.json().await.unwrap();
        for field in [
            "id",
            "organizationId",
            "name",
            "user",
            "env",
            "labels",
            "public",
            "networkBlockAll",
            "kvm",
            "target",
            "cpu",
            "gpu",
            "memory",
            "disk",
            "toolboxProxyUrl",
        ] {
            assert!(dto.get(field).is_some(), "the DTO lacks {field}: {dto}");
        }
        assert_eq!(dto["state"], "started");
        let toolbox = format!(
            "{}/{}",
            dto["toolboxProxyUrl"].as_str().unwrap(),
            dto["id"].as_str().unwrap()
        );
        Api {
            http,
            toolbox,
            token,
        }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.toolbox))
            .bearer_auth(&self.token)
    }

    /// POSTs `body` (of `content_type`) to `path`: the answer.
    async fn send(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.post(path)
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST /process/session` for the session `id`: the answer.
    async fn create_session(&self, id: &str) -> reqwest::Response {
        let body = format!(r#"{{"sessionId": "{id}"}}"#);
        self.send("/process/session", "application/json", body)
            .await
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.toolbox))
            .bearer_auth(&self.token)
    }

    async fn exec(&self, sid: &str, version: Option<&str>, split: bool) -> (u16, String) {
        let mut rb = self
            .post(&format!("/process/session/{sid}/exec"))
            .header("Content-Type", "application/json")
            .body(r#"{"command": "echo out; echo bad >&2; printf tail"}"#);
        if let Some(v) = version {
            rb = rb.header("X-Daytona-SDK-Version", v);
        }
        if split {
            rb = rb.header("X-Daytona-Split-Output", "true");
        }
        let r = rb.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn session_answers_follow_the_sdk_version_header() {
    let (_emu, api) = Api::start().await;
    let r = api.create_session("s1").await;
    assert_eq!(r.status(), 201);
    assert!(
        r.bytes().await.unwrap().is_empty(),
        "201 with an empty body"
    );
    let dup = api.create_session("s1").await;
    assert_eq!(dup.status(), 409);
    let reserved = api.create_session("entrypoint").await;
    assert_eq!(reserved.status(), 400);

    let raw = "\u{1}\u{1}\u{1}out\n\u{2}\u{2}\u{2}bad\n\u{1}\u{1}\u{1}tail\n";
    // >= 0.167: raw output plus the split.
    let (status, body) = api.exec("s1", Some("0.226.1"), false).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stdout"], "out\ntail\n", "{v}");
    assert_eq!(v["stderr"], "bad\n");
    assert_eq!(v["exitCode"], 0);
    // Whole-line interleaving between the two labellers is nondeterministic: compare sorted.
    let mut lines: Vec<&str> = v["output"].as_str().unwrap().lines().collect();
    lines.sort_unstable();
    let mut want: Vec<&str> = raw.lines().collect();
    want.sort_unstable();
    assert_eq!(lines, want);
    // 0.27 <= v < 0.167: raw output only.
    let (_, body) = api.exec("s1", Some("0.100.0"), false).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v.get("stdout").is_none(), "{v}");
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("\u{1}\u{1}\u{1}out\n")
    );
    // No version: prefixes stripped, merged.
    let (_, body) = api.exec("s1", None, false).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    let merged = v["output"].as_str().unwrap();
    assert!(
        !merged.contains('\u{1}') && !merged.contains('\u{2}'),
        "{v}"
    );
    assert!(merged.contains("out\n") && merged.contains("bad\n") && merged.contains("tail\n"));
    // No version but X-Daytona-Split-Output: raw.
    let (_, body) = api.exec("s1", None, true).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("\u{2}\u{2}\u{2}bad\n")
    );
    let cid = v["cmdId"].as_str().unwrap().to_owned();

    // Plain logs: JSON for >= 0.167, text/plain otherwise.
    let logs = api
        .get(&format!("/process/session/s1/command/{cid}/logs"))
        .header("X-Daytona-SDK-Version", "0.226.1")
        .send()
        .await
        .unwrap();
    let v: Value = logs.json().await.unwrap();
    assert_eq!(v["stderr"], "bad\n");
    let logs = api
        .get(&format!("/process/session/s1/command/{cid}/logs"))
        .send()
        .await
        .unwrap();
    assert!(
        logs.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = logs.text().await.unwrap();
    assert!(!text.contains('\u{1}'), "{text:?}");

    // The error envelope.
    let r = api
        .get("/process/session/nope/command/x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["statusCode"], 404);
    assert_eq!(v["code"], "NOT_FOUND");
    assert_eq!(v["source"], "DAYTONA_DAEMON");
    for f in ["message", "timestamp", "path", "method"] {
        assert!(v.get(f).is_some(), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_download_is_the_daemons_multipart() {
    let (_emu, api) = Api::start().await;
    let up = api
        .post("/files/bulk-upload")
        .header("Content-Type", "multipart/form-data; boundary=b")
        .body(
            "--b\r\nContent-Disposition: form-data; name=\"files[0].path\"\r\n\r\n/tmp/a.txt\r\n\
             --b\r\nContent-Disposition: form-data; name=\"files[0].file\"; filename=\"/tmp/a.txt\"\r\n\
             Content-Type: text/plain\r\n\r\nhello world\r\n--b--\r\n",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(up.status(), 200);
    let v: Value = up.json().await.unwrap();
    assert_eq!(v["files"][0]["path"], "/tmp/a.txt");
    assert_eq!(v["files"][0]["bytes"], 11);

    let bad = api.send("/files/bulk-upload", "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"files[0].file\"; filename=\"x\"\r\n\r\nx\r\n--b--\r\n").await;
    assert_eq!(bad.status(), 400);
    let v: Value = bad.json().await.unwrap();
    assert_eq!(v["errors"][0], "file[0]: missing .path metadata");

    let r = api
        .post("/files/bulk-download")
        .header("Accept", "multipart/form-data")
        .json(&serde_json::json!({"paths": ["/tmp/a.txt", "/tmp/missing"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"
    );
    let body = r.text().await.unwrap();
    assert!(
        body.starts_with(
            "--DAYTONA-FILE-BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; \
         filename=\"/tmp/a.txt\"; filename*=utf-8''%2Ftmp%2Fa.txt\r\nContent-Length: 11\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\nhello world\r\n--DAYTONA-FILE-BOUNDARY\r\n\
         Content-Disposition: form-data; name=\"error\"; filename=\"/tmp/missing\"; \
         filename*=utf-8''%2Ftmp%2Fmissing\r\nContent-Type: application/json; charset=utf-8\r\n\r\n"
        ),
        "{body}"
    );
    assert!(body.contains("\"code\":\"FILE_NOT_FOUND\""), "{body}");
    assert!(body.ends_with("\r\n--DAYTONA-FILE-BOUNDARY--\r\n"));

    let empty = api
        .post("/files/bulk-download")
        .json(&serde_json::json!({"paths": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 400);
}
