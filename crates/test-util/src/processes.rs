//! Checks of process handles ([`Processes`]) that hold for any adapter, for the adapters' own
//! process tests against their emulators.

use execseam_core::{
    Command, Exit, Output, ProcessHandle, Processes, StartKey, StartRequest, StreamOffsets,
};

/// `sh -c script`.
pub fn sh(script: &str) -> Command {
    Command::new(["sh", "-c", script]).expect("a valid command")
}

/// Everything the process behind `handle` wrote, from offset 0, and its exit: what a client
/// that attaches later sees.
pub async fn output_from_start(p: &dyn Processes, handle: &ProcessHandle) -> Output {
    p.attach(handle, StreamOffsets::ZERO)
        .await
        .expect("attach")
        .collect()
        .await
        .expect("the output up to the exit")
}

/// A detached command gets its stdin (with a NUL byte), its env and its workdir.
pub async fn stdin_env_and_workdir_reach(p: &dyn Processes) {
    let cmd = Command::builder(["sh", "-c", "cat; printf '|%s|%s|' \"$A_1\" \"$(pwd)\""])
        .stdin("in\x00put")
        .env("A_1", "v 1")
        .workdir("/tmp")
        .build()
        .expect("a valid command");
    let s = p
        .start(StartRequest::new(StartKey::new("io").expect("a key"), cmd))
        .await
        .expect("start");
    let out = output_from_start(p, &s.handle).await;
    assert_eq!(&out.stdout[..], b"in\x00put|v 1|/tmp|");
    assert_eq!(out.exit, Exit::Code(0));
}
