//! Sessions through the bridge client itself (private to the crate), against the bridge
//! emulator.

use execseam_core::{Command, Exec, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::cloudflare::CloudflareEmulator;

use crate::wire::CreateSessionRequest;
use crate::{CloudflareConfig, CloudflareProvider, OutputMode};

fn config(emu: &CloudflareEmulator) -> CloudflareConfig {
    CloudflareConfig::new(emu.base_url())
        .api_key("secret")
        .mode(OutputMode::Streaming)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configured_session_is_sent_as_session_id() {
    let emu = CloudflareEmulator::start(EmulatorOptions {
        token: Some("secret".into()),
        ..EmulatorOptions::default()
    })
    .await
    .expect("emulator");
    let plain = CloudflareProvider::new(config(&emu))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let request = CreateSessionRequest {
        id: Some("agent-1".into()),
        env: Some([("SESSION_VAR".to_owned(), "from the session".to_owned())].into()),
        ..CreateSessionRequest::default()
    };
    let sid = plain
        .client()
        .create_session(plain.id(), &request)
        .await
        .unwrap();
    assert_eq!(sid, "agent-1");
    let in_session = CloudflareProvider::new(config(&emu).session_id("agent-1"))
        .unwrap()
        .connect(plain.id())
        .await
        .unwrap();
    let printenv = || Command::new(["sh", "-c", "printf '%s' \"${SESSION_VAR-unset}\""]).unwrap();
    let out = in_session.exec(printenv()).await.unwrap();
    // The real bridge re-emits a session command's output line by line, a final partial line
    // gaining a newline (the container's background session stream; research note
    // cf-vercel-modal-nf.md, correction "Cloudflare bridge sessions"): not byte-exact.
    assert_eq!(out.stdout.as_ref(), b"from the session\n");
    let out = plain.exec(printenv()).await.unwrap();
    assert_eq!(
        out.stdout.as_ref(),
        b"unset",
        "sessionless without the header"
    );
    plain
        .client()
        .delete_session(plain.id(), "agent-1")
        .await
        .unwrap();
}
