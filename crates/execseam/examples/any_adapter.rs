//! A program that uses only the facade: it picks its adapter from a string
//! (`cargo run -p execseam --example any_adapter --features e2b -- e2b`), configures it from the
//! environment, creates a sandbox, runs the README's command in it and closes it.

use execseam::{Command, Error, Exit, Provider, Sandbox, SandboxSpec, Tool};

/// Runs the README's example through adapter `name`, configured by `vars`.
pub async fn run(name: &str, vars: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
    let provider = execseam::adapter(name)?.build(vars)?;
    let spec = if provider.lifecycle().spec.labels {
        SandboxSpec::new().with_label("example", "any-adapter")
    } else {
        SandboxSpec::new()
    };
    let sandbox = provider.create(spec).await?;
    let cmd = Command::builder(["sh", "-c", "printf o; printf e >&2; exit 3"])
        .tool(Tool::BASH)
        .env("GREETING", "hello")
        .build()?; // invalid commands fail here, before any I/O
    let result = sandbox.exec(cmd).await;
    // Teardown is awaited, whatever the command did.
    let closed = sandbox.close().await;
    let out = result?;
    closed?;
    // A non-zero exit is a result, with stdout and stderr kept apart.
    assert_eq!((&out.stdout[..], &out.stderr[..]), (&b"o"[..], &b"e"[..]));
    assert_eq!(out.exit, Exit::Code(3));
    println!(
        "{name}: sandbox {} ran, exit {:?}, stdout {:?}, stderr {:?}; closed",
        sandbox.id(),
        out.exit,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "local".to_owned());
    run(&name, &|k: &str| std::env::var(k).ok()).await
}
