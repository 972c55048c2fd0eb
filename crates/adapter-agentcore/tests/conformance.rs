//! The conformance suite against the AgentCore emulator (`cargo xtask conformance --adapter
//! agentcore`), or against the real service with `EXECSEAM_LIVE=1` (credentials, region and
//! optionally the session from the environment: see `AgentCoreConfig::from_env`).
//!
//! `EXECSEAM_AGENTCORE_MODE=task` runs it in `ExecMode::Task` (the record is the same; the
//! `task_mode` test runs that mode on every `cargo test`).

mod common;

use std::sync::Arc;

use execseam_agentcore::{AgentCoreConfig, AgentCoreExec, ExecMode};
use execseam_conformance::Target;

fn mode() -> ExecMode {
    match std::env::var("EXECSEAM_AGENTCORE_MODE").as_deref() {
        Ok("task") => ExecMode::Task,
        _ => ExecMode::Command,
    }
}

/// Stops the live session when the suite ends.
struct Close(AgentCoreExec);

impl Drop for Close {
    fn drop(&mut self) {
        let exec = self.0.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move { execseam_core::Sandbox::close(&exec).await });
        }
    }
}

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").is_ok_and(|v| v == "1") {
            let config = AgentCoreConfig::from_env()?;
            let config = if std::env::var_os("AGENTCORE_EXEC_MODE").is_some() {
                config
            } else {
                config.mode(mode())
            };
            let provider = execseam_agentcore::AgentCoreProvider::new(config)?;
            let exec = provider.create(execseam_core::SandboxSpec::new()).await?;
            return Ok(Target::new("agentcore", Arc::new(exec.clone()))
                .provider(Arc::new(provider))
                .scratch("/tmp/execseam-conformance")
                .live(true)
                .keep_alive(Close(exec)));
        }
        common::target("agentcore", mode()).await
    });
}
