//! grpcio (Google's gRPC runtime for Python, pinned in `interop/ax/requirements.txt`) against the
//! ax emulator, with stubs that grpcio-tools' protoc generates from execseam's guest.proto at run
//! time: AX's calling pattern (StartProcess with stdin, WriteProcessInput, StreamProcessOutput to
//! the exit message), offsets, SIGINT, the guest's error codes and the files service, and 9 MiB of
//! output and a 9 MiB file read through a channel with gRPC's default 4 MiB receive limit.
//!
//! The env repository's own Python client (`ate_env`, distribution `ate-env-client`) is not on
//! PyPI, so it cannot be run here; this checks the emulator against the reference gRPC stack.
//! Needs PyPI (or a warm `target/interop/ax` virtualenv); fails loudly without it.

use std::path::PathBuf;

use execseam_emulator_ax::AxEmulator;
use execseam_emulator_kit::EmulatorOptions;
use execseam_test_util::interop;

#[tokio::test(flavor = "multi_thread")]
async fn grpcio_drives_the_emulator() {
    let emu = AxEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop");
    let proto = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto-ax/proto");
    let mut env = emu.env();
    env.push(("AX_PROTO_DIR".into(), proto.to_string_lossy().into_owned()));
    let out = tokio::task::spawn_blocking(move || {
        let python = interop::python_env("ax", &dir.join("requirements.txt"))
            .expect("the grpcio virtualenv (is PyPI reachable?)");
        interop::run_python(&python, &dir.join("interop.py"), &env).expect("python runs")
    })
    .await
    .expect("the blocking task");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "interop.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for check in [
        "ok stdin, separate streams, exit 7",
        "ok resume from an offset",
        "ok SIGINT gives 130",
        "ok NOT_FOUND for an unknown process",
        "ok INTERNAL starting process for a missing program",
        "ok WriteFile/ReadFile, seen by commands",
        "ok an empty WriteFile is INVALID_ARGUMENT",
        "ok NOT_FOUND for a missing file",
        "ok 9 MiB of output in messages of at most 1 MiB, default gRPC limits",
        "ok a 9 MiB ReadFile in chunks of at most 64 KiB, default gRPC limits",
    ] {
        assert!(stdout.contains(check), "missing {check:?}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("done"), "{stdout}");
}
