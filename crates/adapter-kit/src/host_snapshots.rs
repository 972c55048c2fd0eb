//! [`HostSnapshots`]: snapshots kept as files on the host running execseam, for a provider whose
//! service hands a snapshot's bytes to the client and keeps nothing itself (the Cloudflare
//! bridge's `persist` answers a tar of `/workspace`; `hydrate` takes one back).
//!
//! Each snapshot is two files in one directory: `<id>.data` (the provider's bytes) and
//! `<id>.meta` (`<kind>\n<source>\n<unix seconds>\n`), the meta written last, so a snapshot
//! interrupted while written is never listed nor created from. Ids are `<prefix>` and 16 hex
//! digits: anything else names no snapshot (and never a path).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use execseam_core::{Error, ErrorKind, Kept, SnapshotInfo};

const DATA: &str = "data";
const META: &str = "meta";

/// A directory of snapshots of one provider. Built without I/O; the directory is made on the
/// first snapshot.
#[derive(Clone, Debug)]
pub struct HostSnapshots {
    provider: &'static str,
    prefix: &'static str,
    dir: PathBuf,
}

impl HostSnapshots {
    /// Snapshots of `provider` in `dir`, with ids `<prefix><16 hex>`.
    pub fn new(provider: &'static str, prefix: &'static str, dir: impl Into<PathBuf>) -> Self {
        HostSnapshots {
            provider,
            prefix,
            dir: dir.into(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True if `id` is shaped like one of these snapshots' ids.
    pub fn is_id(&self, id: &str) -> bool {
        id.strip_prefix(self.prefix)
            .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    fn file(&self, id: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{id}.{ext}"))
    }

    fn io(&self, operation: &'static str, what: &str, e: std::io::Error) -> Error {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
            _ => ErrorKind::Internal,
        };
        Error::new(kind, format!("{what} ({}): {e}", self.dir.display()))
            .with_provider(self.provider)
            .with_operation(operation)
            .with_source(e)
    }

    /// Keeps `data`, taken from sandbox `source`, as a new snapshot of kind `kind`.
    pub async fn put(&self, source: &str, kind: Kept, data: &[u8]) -> Result<SnapshotInfo, Error> {
        let id = format!("{}{}", self.prefix, crate::id::random_id(16));
        let created = SystemTime::now();
        let secs = created
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (data_path, meta_path) = (self.file(&id, DATA), self.file(&id, META));
        let written = async {
            tokio::fs::create_dir_all(&self.dir).await?;
            tokio::fs::write(&data_path, data).await?;
            tokio::fs::write(&meta_path, format!("{kind}\n{source}\n{secs}\n")).await
        };
        if let Err(e) = written.await {
            let _ = tokio::fs::remove_file(&data_path).await;
            let _ = tokio::fs::remove_file(&meta_path).await;
            return Err(self.io("snapshot", "cannot keep the snapshot", e));
        }
        Ok(SnapshotInfo::new(id, kind)
            .with_source(source)
            .with_created(created)
            .with_size(data.len() as u64))
    }

    /// The snapshot's bytes; one that does not exist (or a malformed id) is `NotFound`.
    pub async fn get(&self, id: &str, operation: &'static str) -> Result<Vec<u8>, Error> {
        let missing = || {
            Error::new(
                ErrorKind::NotFound,
                format!("snapshot {id:?} does not exist in {}", self.dir.display()),
            )
            .with_provider(self.provider)
            .with_operation(operation)
        };
        if !self.is_id(id) || self.info(id).await.is_none() {
            return Err(missing());
        }
        match tokio::fs::read(self.file(id, DATA)).await {
            Ok(data) => Ok(data),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing()),
            Err(e) => Err(self.io(operation, "cannot read the snapshot", e)),
        }
    }

    async fn info(&self, id: &str) -> Option<SnapshotInfo> {
        let meta = tokio::fs::read_to_string(self.file(id, META)).await.ok()?;
        let mut lines = meta.lines();
        let kind = match lines.next()? {
            "filesystem" => Kept::Filesystem,
            "filesystem+memory" => Kept::FilesystemAndMemory,
            _ => return None,
        };
        let mut info = SnapshotInfo::new(id, kind).with_source(lines.next()?);
        if let Some(secs) = lines.next().and_then(|l| l.parse::<u64>().ok()) {
            info = info.with_created(UNIX_EPOCH + Duration::from_secs(secs));
        }
        if let Ok(m) = tokio::fs::metadata(self.file(id, DATA)).await {
            info = info.with_size(m.len());
        }
        Some(info)
    }

    /// The snapshots, of sandbox `source` only when given; no directory yet is none.
    pub async fn list(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        let what = "cannot read the snapshots";
        let mut entries = match tokio::fs::read_dir(&self.dir).await {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("list_snapshots", what, e)),
        };
        let mut out = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| self.io("list_snapshots", what, e))?
        {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".meta")) else {
                continue;
            };
            if !self.is_id(id) {
                continue;
            }
            // One deleted while we list is simply not there.
            if let Some(info) = self.info(id).await
                && source.is_none_or(|s| info.source.as_deref() == Some(s))
            {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// Deletes a snapshot; one that does not exist is `Ok(())`.
    pub async fn delete(&self, id: &str) -> Result<(), Error> {
        if !self.is_id(id) {
            return Ok(());
        }
        // The meta first: a half-deleted snapshot is an unfinished one, never listed.
        for ext in [META, DATA] {
            match tokio::fs::remove_file(self.file(id, ext)).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(self.io("delete_snapshot", "cannot remove the snapshot", e));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn kept_listed_read_and_deleted_and_foreign_names_are_no_snapshots() {
        let dir = std::env::temp_dir().join(format!("execseam-hs-{}", crate::id::random_id(8)));
        let store = HostSnapshots::new("p", "p-snap-", &dir);
        assert!(
            store.list(None).await.unwrap().is_empty(),
            "no directory yet"
        );
        let a = store.put("sb-1", Kept::Filesystem, b"one").await.unwrap();
        let b = store.put("sb-2", Kept::Filesystem, b"two!").await.unwrap();
        assert!(store.is_id(&a.id) && a.id != b.id);
        assert_eq!(a.size_bytes, Some(3));
        assert_eq!(store.get(&b.id, "create").await.unwrap(), b"two!");
        let mut all: Vec<_> = store.list(None).await.unwrap();
        all.sort_by(|x, y| x.source.cmp(&y.source));
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].source.as_deref(), Some("sb-1"));
        assert!(all[0].created.is_some());
        let of_2 = store.list(Some("sb-2")).await.unwrap();
        assert_eq!(of_2.len(), 1);
        assert_eq!(of_2[0].id, b.id);
        // A snapshot without its meta (interrupted) is neither listed nor read.
        std::fs::remove_file(store.file(&a.id, META)).unwrap();
        assert_eq!(store.list(None).await.unwrap().len(), 1);
        let e = store.get(&a.id, "create").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        // A path, or another shape, names nothing.
        for bad in ["../etc/passwd", "p-snap-zz", "x"] {
            let e = store.get(bad, "create").await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotFound, "{bad}");
            store.delete(bad).await.unwrap();
        }
        store.delete(&b.id).await.unwrap();
        store.delete(&b.id).await.unwrap();
        assert_eq!(
            store.get(&b.id, "create").await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
