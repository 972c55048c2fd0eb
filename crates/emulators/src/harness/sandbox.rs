//! The sandbox behind an emulator: a private root directory whose subdirectories are seen, by the
//! sandbox's commands, at the provider's usual paths (E2B `/home/user`, Cloudflare `/workspace`,
//! Sprites `/home/sprite`, …), and a [`LocalExec`] that really runs the commands.
//!
//! Isolation: as root with `unshare` available, each command runs in a private mount namespace
//! where `<root>/<path>` is bind-mounted over each provider path, so commands and the files API
//! see the same files at the same absolute paths and sandboxes do not see each other's. The mount
//! points are created on the host as empty directories if missing. Without that ability the
//! emulator falls back to [`Isolation::Translate`]: the provider paths are replaced by the real
//! directories under the root (the documented degradation: absolute paths differ from the real
//! provider's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use execseam_core::degrade::{self, WRAPPER_STATUS};
use execseam_local::{LAUNCHER_MARK, LocalConfig, LocalExec};
use tokio::task::AbortHandle;

/// How a sandbox's paths are made to look like the provider's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// A private mount namespace per command (needs root and `unshare`).
    Namespaces,
    /// No namespace: provider paths are rewritten to host paths under the sandbox root.
    Translate,
}

impl Isolation {
    /// `Namespaces` if this process can create mount namespaces, else `Translate`.
    pub fn detect() -> Isolation {
        static DETECTED: OnceLock<Isolation> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let ok = std::process::Command::new("unshare")
                .args(["--mount", "--propagation", "private", "--", "true"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Isolation::Namespaces
            } else {
                tracing::warn!(
                    "cannot create mount namespaces (not root, or no unshare): sandbox paths are translated"
                );
                Isolation::Translate
            }
        })
    }
}

/// What a provider's sandbox looks like from inside.
#[derive(Clone, Debug)]
pub struct SandboxSpec {
    /// Absolute paths that each sandbox owns privately (`/home/user`, `/tmp`, `/workspace`).
    pub private_paths: Vec<String>,
    /// The provider's default environment (HOME, USER, PATH, …).
    pub env: BTreeMap<String, String>,
    /// Prefix of the sandbox root directories on the host.
    pub name: String,
}

/// One sandbox: a root directory, a command runner, and the commands still running.
pub struct Sandbox {
    id: String,
    root: PathBuf,
    spec: SandboxSpec,
    isolation: Isolation,
    exec: LocalExec,
    running: Mutex<Vec<AbortHandle>>,
    alive: AtomicBool,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.id)
            .field("root", &self.root)
            .field("isolation", &self.isolation)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Creates a sandbox with a fresh root directory under the system temp dir.
    pub fn create(
        id: impl Into<String>,
        spec: SandboxSpec,
        isolation: Isolation,
    ) -> std::io::Result<Arc<Sandbox>> {
        let id = id.into();
        let root = std::env::temp_dir().canonicalize()?.join(format!(
            "execseam-{}-{}",
            spec.name,
            degrade::temp_path("/").trim_start_matches("/.execseam-")
        ));
        for p in &spec.private_paths {
            std::fs::create_dir_all(root.join(p.trim_start_matches('/')))?;
        }
        let mut env = spec.env.clone();
        let config = match isolation {
            Isolation::Namespaces => {
                let mut launcher: Vec<String> = vec![
                    "unshare".into(),
                    "--mount".into(),
                    "--propagation".into(),
                    "private".into(),
                    "--".into(),
                    "/bin/sh".into(),
                    "-c".into(),
                    // Bind each private directory over its provider path, then run the command.
                    format!(
                        "n=$1; shift; while [ \"$n\" -gt 0 ]; do mkdir -p \"$2\" && mount --bind \"$1\" \"$2\" || {{ printf '%s\\n' '{LAUNCHER_MARK}sandbox mount failed' >&2; exit {WRAPPER_STATUS}; }}; shift 2; n=$((n-1)); done; exec \"$@\""
                    ),
                    "sh".into(),
                    spec.private_paths.len().to_string(),
                ];
                // A target that contains the sandbox roots (a private `/tmp`, since the roots
                // live under the host's temp dir) would hide the sources of the binds after it:
                // mount those last.
                let mut order: Vec<&String> = spec.private_paths.iter().collect();
                order.sort_by_key(|p| root.starts_with(p.as_str()));
                for p in order {
                    launcher.push(
                        root.join(p.trim_start_matches('/'))
                            .to_string_lossy()
                            .into_owned(),
                    );
                    launcher.push(p.clone());
                }
                LocalConfig::new().inherit(["PATH"]).launcher(launcher)
            }
            Isolation::Translate => {
                for v in env.values_mut() {
                    *v = translate_value(&root, &spec.private_paths, v);
                }
                LocalConfig::new().inherit(["PATH"])
            }
        };
        let exec = LocalExec::with_config(config.base_env(env));
        Ok(Arc::new(Sandbox {
            id,
            root,
            spec,
            isolation,
            exec,
            running: Mutex::new(Vec::new()),
            alive: AtomicBool::new(true),
        }))
    }

    /// The sandbox's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The root directory on the host.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The isolation in use.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The runner for this sandbox's commands (they see the provider's paths).
    pub fn exec(&self) -> &LocalExec {
        &self.exec
    }

    /// True until [`destroy`](Self::destroy).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The path as the sandbox's commands see it: with [`Isolation::Translate`] a provider path
    /// (`/home/user/x`) becomes the host path under the root; otherwise it is unchanged.
    pub fn visible_path(&self, sandbox_path: &str) -> String {
        match self.isolation {
            Isolation::Namespaces => sandbox_path.to_owned(),
            Isolation::Translate => {
                translate_value(&self.root, &self.spec.private_paths, sandbox_path)
            }
        }
    }

    /// Where a sandbox path lives on the host, for the emulator's files API. Paths outside the
    /// private directories are the host's own.
    pub fn host_path(&self, sandbox_path: &str) -> PathBuf {
        for p in &self.spec.private_paths {
            if let Some(rest) = strip_dir(sandbox_path, p) {
                return self.root.join(p.trim_start_matches('/')).join(rest);
            }
        }
        if self.isolation == Isolation::Translate
            && let Ok(rel) = Path::new(sandbox_path).strip_prefix(&self.root)
        {
            return self.root.join(rel);
        }
        PathBuf::from(sandbox_path)
    }

    /// Registers a running command, so that [`destroy`](Self::destroy) kills it.
    pub fn track(&self, handle: AbortHandle) {
        let mut running = self.running.lock().expect("running");
        running.retain(|h| !h.is_finished());
        running.push(handle);
    }

    /// Kills every running command and removes the root. Idempotent.
    pub fn destroy(&self) {
        if !self.alive.swap(false, Ordering::SeqCst) {
            return;
        }
        for h in self.running.lock().expect("running").drain(..) {
            h.abort(); // dropping the exec future kills the process group
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.destroy();
    }
}

fn strip_dir<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(dir.trim_end_matches('/'))?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix('/')
    }
}

fn translate_value(root: &Path, private: &[String], value: &str) -> String {
    for p in private {
        if let Some(rest) = strip_dir(value, p) {
            let base = root.join(p.trim_start_matches('/'));
            return if rest.is_empty() {
                base.to_string_lossy().into_owned()
            } else {
                base.join(rest).to_string_lossy().into_owned()
            };
        }
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::{Command, Exec};

    fn spec() -> SandboxSpec {
        SandboxSpec {
            // `/tmp` first on purpose: it contains the roots, so it must be mounted last.
            private_paths: vec!["/tmp".into(), "/home/emu".into()],
            env: [("HOME".to_string(), "/home/emu".to_string())]
                .into_iter()
                .collect(),
            name: "test".into(),
        }
    }

    #[tokio::test]
    async fn files_and_commands_see_the_same_paths_and_sandboxes_are_private() {
        let iso = Isolation::detect();
        let a = Sandbox::create("a", spec(), iso).unwrap();
        let b = Sandbox::create("b", spec(), iso).unwrap();
        std::fs::write(a.host_path("/home/emu/f.txt"), "from files api").unwrap();
        let home = a.visible_path("/home/emu");
        let cmd = Command::builder(["sh", "-c", "cat \"$HOME/f.txt\"; printf x > /tmp/t; pwd"])
            .workdir(&home)
            .build()
            .unwrap();
        let out = a.exec().exec(cmd).await.unwrap();
        assert_eq!(
            out.stdout.as_ref(),
            format!("from files api{home}\n").as_bytes(),
            "{out:?}"
        );
        assert_eq!(std::fs::read(a.host_path("/tmp/t")).unwrap(), b"x");
        if iso == Isolation::Namespaces {
            assert!(
                !b.host_path("/tmp/t").exists(),
                "sandbox b must not see a's /tmp"
            );
            let out = b
                .exec()
                .exec(Command::new(["cat", "/tmp/t"]).unwrap())
                .await
                .unwrap();
            assert_eq!(out.exit, execseam_core::Exit::Code(1));
        }
        let root = a.root().to_path_buf();
        a.destroy();
        assert!(!root.exists());
    }

    #[tokio::test]
    async fn a_missing_workdir_inside_the_sandbox_is_not_found() {
        let s = Sandbox::create("c", spec(), Isolation::detect()).unwrap();
        let cmd = Command::builder(["true"])
            .workdir(s.visible_path("/home/emu/nope"))
            .build()
            .unwrap();
        let err = s.exec().exec(cmd).await.unwrap_err();
        assert_eq!(err.kind(), execseam_core::ErrorKind::NotFound);
    }
}
