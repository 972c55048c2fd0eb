//! The conformance suite against the local adapter (`cargo xtask conformance --adapter local`).

use std::sync::Arc;

use execseam_conformance::Target;
use execseam_local::{LocalConfig, LocalExec, LocalProvider};

fn main() {
    execseam_conformance::main(|| async {
        let dir = std::env::temp_dir()
            .canonicalize()
            .expect("a temp dir")
            .join(format!("execseam-conformance-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let scratch = dir.to_str().expect("a UTF-8 temp dir").to_owned();
        // Local sandboxes for the lifecycle cases, in a root of their own.
        let root = dir.join("sandboxes");
        let provider = LocalProvider::new(LocalConfig::new().sandbox_root(&root))?;
        let count = move || {
            std::fs::read_dir(&root).map_or(0, |d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("local-"))
                    .count()
            })
        };
        Ok(Target::new("local", Arc::new(LocalExec::new()))
            .scratch(scratch)
            .provider(Arc::new(provider))
            .live_sandboxes(count)
            .proptest_cases(64)
            .keep_alive(RemoveOnDrop(dir)))
    });
}

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
