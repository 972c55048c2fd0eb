//! What the tools' test binaries share: a scratch directory removed on drop, and busybox's
//! applets as a `PATH` directory.

#![allow(dead_code)] // Each test binary uses its own part.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

/// A fresh directory (mode 755) under the temporary directory, removed on drop.
pub struct Dir(pub PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().canonicalize().unwrap().join(format!(
            "execseam-tools-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        Dir(d)
    }
    pub fn s(&self) -> String {
        self.0.to_str().unwrap().to_owned()
    }
    pub fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", self.s())
    }
    pub fn file(&self, rel: &str, content: &[u8]) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    pub fn link(&self, rel: &str, to: &Path) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(to, p).unwrap();
    }
}

/// A directory of busybox applet links (the tools' commands, and `more`), if busybox is
/// installed.
pub fn busybox_bin(more: &[&str]) -> Option<Dir> {
    let bb = std::env::var("PATH")
        .ok()?
        .split(':')
        .map(|p| Path::new(p).join("busybox"))
        .find(|p| p.exists())?;
    let d = Dir::new("bb");
    let tools = [
        "sh", "find", "grep", "ls", "printf", "cat", "head", "tail", "rm", "mv", "cp", "mkdir",
        "id",
    ];
    for applet in tools.iter().chain(more) {
        std::os::unix::fs::symlink(&bb, d.0.join(applet)).unwrap();
    }
    Some(d)
}
