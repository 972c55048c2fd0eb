//! Directory images: a copy of one directory of a sandbox, and such a copy mounted into a
//! sandbox at a path (what a provider's "snapshot this directory" and "mount that image here"
//! do, Modal's `snapshot_directory` and `mount_image`).
//!
//! The copy is taken from a thread inside the sandbox (paths, symlinks included, resolve as its
//! commands see them) whose working directory is the image's directory on the host: the
//! sandbox's side is named by absolute paths, the host's by relative ones, so no sandbox path
//! ever names a host file. A mount is a fresh tmpfs over the path, in the sandbox's own mount
//! namespace, filled with a copy of the image: what was there is hidden, not changed, and shows
//! again on unmount; writes under the mount change neither the image nor the source.

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Layer, Sandbox, dir_size};
use crate::sys;

/// A copy of one directory of a sandbox: its files, directories and symlinks with their modes
/// and owners (and the files' modification times). Hard links become separate files; sockets,
/// FIFOs and device files are left out. On the host's disk beside the sandboxes' state
/// directories; removed when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct DirImage(Arc<Layer>);

impl DirImage {
    /// Bytes of the regular files it holds.
    pub fn size_bytes(&self) -> u64 {
        self.0.size
    }
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} needs isolated sandboxes (root)"),
    )
}

impl Sandbox {
    /// Copies the directory `path` as the sandbox sees it into a new [`DirImage`]; the sandbox's
    /// processes are frozen meanwhile (unless paused already), so the copy is one point in time.
    /// `NotFound` when `path` does not exist, `NotADirectory` when it is not a directory.
    /// `Unsupported` in [`Isolation::Translate`](super::Isolation::Translate).
    pub async fn snapshot_dir(&self, path: &str) -> io::Result<DirImage> {
        let ns = self
            .ns()
            .ok_or_else(|| unsupported("a directory snapshot"))?;
        let base = self
            .state
            .parent()
            .unwrap_or(Path::new("/tmp"))
            .to_path_buf();
        let name = format!("execseam-dir-{}", crate::clock::hex_id(16));
        let host = File::open(&base)?;
        let (src, rel) = (PathBuf::from(path), PathBuf::from(&name));
        // The freezer is the host's (its cgroup files are not in the sandbox's view): frozen and
        // thawed from here, the copy made from a thread inside.
        let frozen = ns.clone();
        let was_paused = tokio::task::spawn_blocking(move || {
            let was_paused = frozen.is_paused();
            frozen.freeze().map(|()| was_paused)
        })
        .await
        .map_err(io::Error::other)??;
        let copied = self
            .fs(move |_| {
                sys::fchdir(&host)?;
                copy_dir(&src, &rel)
            })
            .await;
        if !was_paused {
            tokio::task::spawn_blocking(move || ns.thaw())
                .await
                .map_err(io::Error::other)??;
        }
        let dir = base.join(name);
        let layer = Layer {
            size: dir_size(&dir),
            dir,
        };
        copied?;
        Ok(DirImage(Arc::new(layer)))
    }

    /// Mounts a copy of `image` (`None`: an empty directory) at `path`, creating the directory if
    /// it is missing: a fresh tmpfs over whatever was there, which [`unmount_dir`](Self::unmount_dir)
    /// shows again. `InvalidInput` for `/` or a relative path. `Unsupported` in
    /// [`Isolation::Translate`](super::Isolation::Translate).
    pub async fn mount_dir(&self, path: &str, image: Option<&DirImage>) -> io::Result<()> {
        self.ns().ok_or_else(|| unsupported("mounting an image"))?;
        let target = mount_point(path)?;
        let source = image.map(|i| File::open(&i.0.dir)).transpose()?;
        self.fs(move |_| {
            std::fs::create_dir_all(&target)?;
            sys::mount_tmpfs(&target)?;
            let Some(source) = source else { return Ok(()) };
            sys::fchdir(&source)?;
            copy_dir(Path::new("."), &target).inspect_err(|_| {
                let _ = sys::unmount(&target);
            })
        })
        .await
    }

    /// Unmounts the most recent [`mount_dir`](Self::mount_dir) at `path`: what was beneath shows
    /// again. `InvalidInput` where nothing is mounted at `path` (the caller keeps track of which
    /// mounts are its own: the sandbox has others, `/proc` for one).
    pub async fn unmount_dir(&self, path: &str) -> io::Result<()> {
        self.ns()
            .ok_or_else(|| unsupported("unmounting an image"))?;
        let target = mount_point(path)?;
        self.fs(move |_| sys::unmount(&target)).await
    }
}

/// `path` as a mount point: absolute, not `/`.
fn mount_point(path: &str) -> io::Result<PathBuf> {
    let trimmed = path.trim_end_matches('/');
    if !path.starts_with('/') || trimmed.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the mount point must be an absolute path other than /, got {path:?}"),
        ));
    }
    Ok(PathBuf::from(trimmed))
}

/// Copies the directory `from` into `to` (created if missing; its mode and owner become
/// `from`'s), never following a symlink inside `from`.
fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(from)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", from.display()),
        ));
    }
    match std::fs::create_dir(to) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let m = std::fs::symlink_metadata(&src)?;
        let kind = m.file_type();
        if kind.is_dir() {
            copy_dir(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
            std::os::unix::fs::lchown(&dst, Some(m.uid()), Some(m.gid()))?;
        } else if kind.is_file() {
            let mut input = File::open(&src)?;
            let mut output = File::create_new(&dst)?;
            io::copy(&mut input, &mut output)?;
            output.set_modified(m.modified()?)?;
            set_owner_and_mode(&dst, &m)?;
        }
    }
    set_owner_and_mode(to, &meta)
}

fn set_owner_and_mode(path: &Path, m: &std::fs::Metadata) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(m.uid()), Some(m.gid()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(m.mode() & 0o7777))
}
