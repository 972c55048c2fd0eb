//! The official Modal client (`modal==1.6.4`, pinned in `interop/modal/requirements.txt`)
//! against the Modal emulator: sandbox create / from_id / list / names / terminate, exec (argv,
//! workdir, env, stdin, separate streams, signals, timeouts, poll), what process handles rely on
//! (one exec per `exec_id`, reads from an offset, stdin by offset), `exec(pty=True)` (a real
//! terminal: size, TERM, echo, ^C, ^D), `sb.filesystem`, the V1
//! backend, the sandbox's own stdio (the entrypoint's stdout/stderr by offset, its stdin with
//! EOF) and the image's `ENV`/`WORKDIR`, filesystem snapshots (`snapshot_filesystem`, a sandbox
//! from the image, `image_delete`), directory snapshots (`snapshot_directory`, `mount_image`,
//! `unmount_image`), tunnels (`encrypted_ports`, `unencrypted_ports`, `h2_ports`,
//! `tunnels()`, `Tunnel.url` over TLS), and faults mapped to the client's own exceptions and
//! retries. The same virtualenv
//! re-exports the schema from the wheel and checks it against the checked-in descriptor set.
//!
//! Needs PyPI (or a warm `target/interop/modal` virtualenv); fails loudly without it.

use std::path::PathBuf;

use execseam_emulator_kit::{EmulatorOptions, Fault, FaultRule};
use execseam_emulator_modal::ModalEmulator;
use execseam_test_util::interop;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop")
}

fn python() -> PathBuf {
    interop::python_env("modal", &dir().join("requirements.txt"))
        .expect("the modal virtualenv (is PyPI reachable?)")
}

async fn run(args: &[&str], env: Vec<(String, String)>) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let python = python();
        std::process::Command::new(&python)
            .arg(dir().join("interop.py"))
            .args(&args)
            .envs(env)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("python runs")
    })
    .await
    .expect("the blocking task");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "interop.py failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn checks(stdout: &str) -> usize {
    stdout.lines().filter(|l| l.starts_with("ok ")).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_client_drives_sandboxes_exec_and_files() {
    let emu = ModalEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator");
    // The tunnels' TLS certificate, trusted by the client's process (Python's ssl honours it).
    let ca = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(ca.path(), emu.tunnel_ca_pem()).expect("the certificate");
    let mut env = emu.env();
    env.push(("SSL_CERT_FILE".into(), ca.path().display().to_string()));
    let stdout = run(&["main"], env).await;
    for check in [
        "ok Sandbox.create returns a V2 sandbox id (not the V1 shape)",
        "ok exec: stdin reaches the command, stdout is its own stream",
        "ok exec: stderr is a separate stream",
        "ok exec: wait() gives the exit code",
        "ok exec: argv is passed as is, never re-parsed by a shell",
        "ok exec: death by SIGTERM is returncode 143 (128 + 15)",
        "ok exec: poll() is None while the command runs",
        "ok exec: timeout_secs kills the command in the sandbox",
        "ok Sandbox.from_id: exec works on the reattached sandbox",
        "ok Sandbox.list(tags=) filters by tag",
        "ok filesystem: list_files types",
        "ok filesystem: copy_from_local then copy_to_local (streamed stdin), exact",
        "ok handles: three exec_start calls under one exec_id (two at once) run one command",
        "ok handles: exec_stdio_read after the exit, from 0 and from a mid offset, byte-exact per stream",
        "ok handles: stdin by offset with eof: exact input, then closed",
        "ok handles: a signal death is exit_status.signal",
        "ok pty: the command is on a terminal, stderr merged into stdout, stderr empty",
        "ok pty: the window size and TERM of pty_info",
        "ok pty: a typed line is echoed by the terminal, then by cat",
        "ok pty: ^C typed is the terminal's SIGINT (130)",
        "ok a sandbox past its timeout: wait() raises SandboxTimeoutError",
        "ok a sandbox from the snapshot image has the files as they were",
        "ok the source and the sandbox from its snapshot share nothing",
        "ok mount_image: another sandbox sees the directory as it was at snapshot_directory",
        "ok mount_image replaces what the directory held",
        "ok a mounted image is a copy: writes under it reach neither the source nor the image",
        "ok unmount_image shows the directory as it was before the mount",
        "ok mount_image(Image.from_scratch()) mounts an empty directory",
        "ok mounting a deleted directory snapshot is NotFoundError",
        "ok _experimental_snapshot (a memory snapshot) is UnimplementedError, never files only",
        "ok creating from a deleted snapshot image is NotFoundError",
        "ok GET Tunnel.url (TLS, the emulator's certificate trusted) reaches the sandbox's server",
        "ok an unencrypted port's tcp_socket is the raw TCP stream to the sandbox's port",
        "ok an h2_ports tunnel negotiates h2 (TUNNEL_TYPE_H2)",
        "ok a port nothing in the sandbox listens on closes the connection",
        "ok a terminated sandbox's tunnel is closed",
        "ok terminate(wait=True) gives 137",
    ] {
        assert!(stdout.contains(check), "missing {check:?}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("done"), "{stdout}");
    eprintln!("{} checks passed (main)", checks(&stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_client_drives_the_v1_backend() {
    let emu = ModalEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator");
    let mut env = emu.env();
    env.push(("MODAL_SANDBOX_V2".into(), "0".into()));
    let stdout = run(&["v1"], env).await;
    assert!(
        stdout.contains("ok V1: exec through the task command router"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("done"), "{stdout}");
    eprintln!("{} checks passed (v1)", checks(&stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_client_reads_and_writes_the_entrypoints_stdio_and_sees_the_image_env() {
    let emu = ModalEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator");
    let stdout = run(&["entrypoint"], emu.env()).await;
    for check in [
        "ok entrypoint: Sandbox.create('echo', 'hello world').stdout.read() (the docstring's example)",
        "ok entrypoint: stdin writes reach it in order, EOF ends its input",
        "ok entrypoint: stderr is its own stream",
        "ok entrypoint: its exit code is the sandbox's returncode",
        "ok entrypoint: stdin after it exited is ValueError",
        "ok entrypoint: stdout is live (the first line before the command ends)",
        "ok image: ENV reaches the entrypoint, WORKDIR is its cwd, Sandbox.create(env=) wins",
        "ok image: ENV and WORKDIR apply to every exec",
        "ok image: an exec's env wins over the image's ENV",
        "ok image: Sandbox.create(workdir=) wins over WORKDIR",
    ] {
        assert!(stdout.contains(check), "missing {check:?}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("done"), "{stdout}");
    eprintln!("{} checks passed (entrypoint)", checks(&stdout));

    // Past the retention, reads start at the oldest retained byte and the client says so.
    emu.set_entrypoint_retention(1000);
    let stdout = run(&["retention"], emu.env()).await;
    assert!(
        stdout.contains("ok retention: the client reports the dropped bytes"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("done"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_client_maps_the_emulators_faults() {
    let emu = ModalEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator");
    let rule = |s: &str| s.parse::<FaultRule>().expect("rule");

    // Rejected credentials on create: AuthError, not retried.
    emu.faults().add(rule("create=auth"));
    let out = run(&["fault", "create-auth"], emu.env()).await;
    assert!(out.contains("FAULT create-auth AuthError"), "{out}");

    // INTERNAL on create after the sandbox was made: the client retries with the same
    // idempotency key and gets the first sandbox: one sandbox, not two.
    emu.faults().add(rule("create=500"));
    let out = run(&["fault", "create-500"], emu.env()).await;
    assert!(out.contains("FAULT create-500 created 1"), "{out}");

    // UNAVAILABLE on TaskExecStart: retried with the same exec_id; the command ran once.
    let before = emu.faults().count("exec");
    emu.faults().arm("exec", Fault::Unavailable);
    let out = run(&["fault", "exec-503"], emu.env()).await;
    assert!(out.contains("FAULT exec-503 code 0 runs 1"), "{out}");
    assert_eq!(emu.faults().count("exec") - before, 2, "one retry");

    // RESOURCE_EXHAUSTED with Modal's RPCRetryPolicy detail: the client waits, then succeeds.
    emu.faults().arm(
        "exec",
        Fault::RateLimited {
            retry_after_secs: 1,
        },
    );
    let out = run(&["fault", "exec-429"], emu.env()).await;
    assert!(out.contains("FAULT exec-429 code 0 waited True"), "{out}");

    // The sandbox vanishes mid-command: the client raises NotFoundError.
    emu.faults().arm("exec", Fault::SandboxVanishes);
    let out = run(&["fault", "exec-vanish"], emu.env()).await;
    assert!(out.contains("FAULT exec-vanish NotFoundError"), "{out}");

    // The router keeps rejecting the JWT: one retry (the JWT is far from expiry, so it is
    // not refreshed), then AuthError.
    let before = emu.faults().count("exec");
    emu.faults().add(rule("exec=auth@always"));
    let out = run(&["fault", "exec-auth"], emu.env()).await;
    emu.faults().clear();
    assert!(out.contains("FAULT exec-auth AuthError"), "{out}");
    assert_eq!(emu.faults().count("exec") - before, 2, "one retry");
}

#[test]
fn the_checked_in_descriptor_set_is_the_pinned_wheels() {
    let export = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto-modal/proto/export.py");
    let out = std::process::Command::new(python())
        .arg(&export)
        .arg("--check")
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
