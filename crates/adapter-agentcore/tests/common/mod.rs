//! Shared setup: the emulator in-process and the adapter pointed at it.
#![allow(dead_code)]

use std::sync::Arc;

use execseam_agentcore::{AgentCoreConfig, AgentCoreExec, AgentCoreProvider, ExecMode};
use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind};
use execseam_core::{Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::agentcore::{ACCESS_KEY_ID, AgentCoreEmulator, REGION, SESSION_ROOT};

pub fn io(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, format!("emulator: {e}"))
}

pub async fn emulator() -> AgentCoreEmulator {
    AgentCoreEmulator::start(EmulatorOptions::default())
        .await
        .expect("the emulator starts")
}

/// The adapter's configuration for `emu` (what `from_env` would read from `emu.env()`).
pub fn config(emu: &AgentCoreEmulator) -> AgentCoreConfig {
    AgentCoreConfig::new(REGION, ACCESS_KEY_ID, "not-verified").endpoint_url(emu.base_url())
}

/// An adapter with its own session. Without mount namespaces the sandbox paths are translated,
/// so the adapter is told where the session root really is.
pub async fn connect(emu: &AgentCoreEmulator, config: AgentCoreConfig) -> AgentCoreExec {
    let exec = AgentCoreProvider::new(config.clone())
        .expect("a provider")
        .create(SandboxSpec::new())
        .await
        .expect("the adapter starts a session");
    let sid = exec.id().to_owned();
    let root = emu.visible_path(&sid, SESSION_ROOT).expect("a session");
    if root == SESSION_ROOT {
        return exec;
    }
    let tmp = emu.visible_path(&sid, "/tmp").expect("a session");
    // The same session through translated paths; that handle owns it now.
    exec.set_owned(false);
    let attached = AgentCoreProvider::new(config.session_root(root).temp_dir(tmp))
        .expect("a provider")
        .attach(&sid)
        .expect("a handle");
    attached.set_owned(true);
    attached
}

/// A handle on session `id` (no request).
pub fn attach(config: AgentCoreConfig, id: &str) -> AgentCoreExec {
    AgentCoreProvider::new(config)
        .expect("a provider")
        .attach(id)
        .expect("a handle")
}

/// A port where nothing listens.
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The conformance target against a fresh emulator, in `mode`.
pub async fn target(name: &str, mode: ExecMode) -> Result<Target, Error> {
    let emu = AgentCoreEmulator::start(EmulatorOptions::default())
        .await
        .map_err(io)?;
    let config = config(&emu).mode(mode);
    let exec = connect(&emu, config.clone()).await;
    let scratch = emu
        .visible_path(exec.id(), "/tmp/execseam-conformance")
        .expect("a session");
    let dead = attach(
        config
            .clone()
            .endpoint_url(format!("http://127.0.0.1:{}", dead_port())),
        "01DEADENDPOINT000000000000",
    );
    let gone = attach(config.clone(), "01VANISHED0000000000000000");
    let count = emu.sandbox_counter();
    Ok(Target::new(name, Arc::new(exec))
        .environment(execseam_emulators::Isolation::detect().record_line())
        .provider(Arc::new(AgentCoreProvider::new(config)?))
        .live_sandboxes(count)
        .scratch(scratch)
        .dead_endpoint(Arc::new(dead))
        .vanished_sandbox(Arc::new(gone))
        .faults(Arc::new(emu.faults().clone()))
        .proptest_cases(16)
        .keep_alive(emu))
}
