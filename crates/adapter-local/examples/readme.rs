use std::time::Duration;

use execseam_core::{Command, ErrorKind, Exec, Exit, Tool};
use execseam_layers::ExecExt;
use execseam_local::LocalExec;

#[tokio::main]
async fn main() -> Result<(), execseam_core::Error> {
    // Any adapter works here: LocalExec, FlyExec, E2bExec, … all are `Exec`.
    let sandbox = LocalExec::new().with_deadline(Duration::from_secs(30));

    let cmd = Command::builder(["sh", "-c", "printf o; printf e >&2; exit 3"])
        .tool(Tool::BASH)
        .workdir("/tmp")
        .env("GREETING", "hello")
        .build()?; // invalid commands fail here, before any I/O

    match sandbox.exec(cmd).await {
        // A non-zero exit is a result, with stdout and stderr kept apart.
        Ok(out) => {
            assert_eq!((&out.stdout[..], &out.stderr[..]), (&b"o"[..], &b"e"[..]));
            assert_eq!(out.exit, Exit::Code(3));
            if out.exit.is_ambiguous_kill() {
                // 137/143: only the host that set the envelope can say why.
            }
        }
        // An infrastructure failure is the error, typed, with a retry class.
        Err(e) if e.kind() == ErrorKind::Timeout(execseam_core::Deadline::Command) => {
            eprintln!("deadline: partial output {:?}", e.partial());
        }
        Err(e) if e.retry().is_safe() => eprintln!("nothing ran, safe to retry: {e}"),
        Err(e) => return Err(e),
    }
    Ok(())
}
