//! The conformance suite against the Chrono emulator (`cargo xtask conformance --adapter
//! chrono`), or against a real service with `EXECSEAM_LIVE=1` (`CHRONO_BASE_URL`,
//! `CHRONO_TOKEN`, optionally `CHRONO_DELEGATION_TOKEN`, `CHRONO_VIA`).

use std::sync::Arc;

use execseam_chrono::{ChronoConfig, ChronoExec, ChronoProvider};
use execseam_conformance::Target;
use execseam_core::{Error, ErrorKind};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::chrono::{ChronoEmulator, ChronoOptions};
use execseam_emulators::kit::sandbox::Mount;

fn setup(e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("cannot start the Chrono emulator: {e}"),
    )
}

/// A loopback URL where nothing listens (a port bound, then released).
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = l.local_addr().expect("its address").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

fn main() {
    execseam_conformance::main(|| async {
        if std::env::var("EXECSEAM_LIVE").is_ok_and(|v| v == "1") {
            let chrono = ChronoExec::from_env()?;
            return Ok(Target::new("chrono", Arc::new(chrono))
                .scratch("/tmp/execseam-conformance")
                .proptest_cases(4)
                .children_end_with_the_command(CHILDREN)
                .live(true));
        }
        // TypeScript runs on tsx, pinned and installed from npm (fails loudly without npm).
        let mut options = ChronoOptions::default();
        options.runtimes.typescript =
            Some(execseam_test_util::interop::typescript_runtime().map_err(setup)?);
        // Each execution is a fresh sandbox: the suite's scratch directory (fixtures written by
        // one command, read by the next) is a host directory mounted into every sandbox.
        let scratch = Scratch::new();
        let mut emulator = EmulatorOptions::default();
        emulator.sandboxing.mounts.push(Mount {
            host: scratch.0.clone().into(),
            sandbox: SCRATCH.into(),
            read_only: false,
        });
        let emu = ChronoEmulator::start_with(emulator, options)
            .await
            .map_err(setup)?;
        let config = |base: String| ChronoConfig::new(base).token(emu.token()).timeout_secs(120);
        let chrono = ChronoExec::new(config(emu.base_url()))?;
        let dead = ChronoExec::new(config(dead_url()))?;
        let provider = ChronoProvider::new(config(emu.base_url()))?;
        Ok(Target::new("chrono", Arc::new(chrono))
            .environment(execseam_emulators::Isolation::detect().record_line())
            .scratch(SCRATCH)
            .dead_endpoint(Arc::new(dead))
            .provider(Arc::new(provider))
            .faults(Arc::new(emu.faults().clone()))
            .children_end_with_the_command(CHILDREN)
            .proptest_cases(12)
            .keep_alive(emu)
            .keep_alive(scratch))
    });
}

/// Why a background child ends with its command here.
const CHILDREN: &str = "Chrono runs every execution in a fresh sandbox removed when it ends \
     (docs/adapters/chrono.md, Lifecycle), and the emulator kills the execution's process group";

/// Where the scratch directory appears inside every sandbox.
const SCRATCH: &str = "/mnt/execseam-conformance";

/// The host side of the scratch directory; removed when the target is dropped.
struct Scratch(String);

impl Scratch {
    fn new() -> Scratch {
        Scratch(scratch())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> String {
    let dir = std::path::Path::new("/var/tmp")
        .canonicalize()
        .expect("/var/tmp")
        .join(format!(
            "execseam-chrono-conformance-{}",
            std::process::id()
        ));
    std::fs::create_dir_all(&dir).expect("the scratch dir");
    dir.to_string_lossy().into_owned()
}
