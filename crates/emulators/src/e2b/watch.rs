//! `filesystem.Filesystem` watchers for the polling API the synchronous SDK uses
//! (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`; envd `services/filesystem/
//! watch_sync.go`). envd watches with fsnotify; the emulator scans the directory every 50 ms and
//! reports the differences as fsnotify would name them: a new entry `CREATE` (and `WRITE` when it
//! already has content), a changed size or modification time `WRITE`, a changed mode `CHMOD`, a
//! vanished entry `REMOVE` (a rename is a `REMOVE` and a `CREATE`). Names are relative to the
//! watched directory; `recursive` covers every level below it, otherwise only its entries.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use super::connect::RpcError;
use super::{Sbx, resolve, user_of};

/// One watcher's state.
pub(crate) struct Watcher {
    events: Mutex<Vec<Value>>,
}

type Snapshot = BTreeMap<String, (u64, i64, i64, u32)>;

fn scan(dir: &std::path::Path, rel: &str, recursive: bool, out: &mut Snapshot) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let Ok(md) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        out.insert(
            r.clone(),
            (md.len(), md.mtime(), md.mtime_nsec(), md.mode()),
        );
        if recursive && md.is_dir() {
            scan(&e.path(), &r, true, out);
        }
    }
}

fn diff(old: &Snapshot, new: &Snapshot, events: &mut Vec<Value>) {
    let ev = |name: &str, t: &str| json!({"name": name, "type": t});
    for (name, now) in new {
        match old.get(name) {
            None => {
                events.push(ev(name, "EVENT_TYPE_CREATE"));
                if now.0 > 0 && now.3 & 0o170000 == 0o100000 {
                    events.push(ev(name, "EVENT_TYPE_WRITE"));
                }
            }
            Some(was) => {
                if (was.0, was.1, was.2) != (now.0, now.1, now.2) && now.3 & 0o170000 != 0o040000 {
                    events.push(ev(name, "EVENT_TYPE_WRITE"));
                }
                if was.3 != now.3 {
                    events.push(ev(name, "EVENT_TYPE_CHMOD"));
                }
            }
        }
    }
    for name in old.keys() {
        if !new.contains_key(name) {
            events.push(ev(name, "EVENT_TYPE_REMOVE"));
        }
    }
}

async fn poll(
    sbx: Weak<Sbx>,
    watcher: Weak<Watcher>,
    path: String,
    recursive: bool,
    mut last: Snapshot,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (Some(s), Some(w)) = (sbx.upgrade(), watcher.upgrade()) else {
            return;
        };
        let p = path.clone();
        let Ok(now) = s
            .sandbox
            .fs(move |fs| {
                let mut snap = Snapshot::new();
                scan(&fs.path(&p), "", recursive, &mut snap);
                Ok(snap)
            })
            .await
        else {
            return;
        };
        let mut events = Vec::new();
        diff(&last, &now, &mut events);
        if !events.is_empty() {
            w.events.lock().expect("events").extend(events);
        }
        last = now;
    }
}

/// `CreateWatcher {path, recursive}`: the directory must exist (`not_found`) and be one
/// (`invalid_argument`); answers `{watcherId}`.
pub(crate) async fn create(
    sbx: &Arc<Sbx>,
    v: &Value,
    headers: &http::HeaderMap,
) -> Result<Value, RpcError> {
    let user = user_of(headers).map_err(|m| RpcError::new("unauthenticated", m))?;
    let path = resolve(v.get("path").and_then(|p| p.as_str()).unwrap_or(""), &user);
    let recursive = v
        .get("recursive")
        .and_then(|r| r.as_bool())
        .unwrap_or(false);
    let p = path.clone();
    let first = sbx
        .sandbox
        .fs(move |fs| {
            let host = fs.path(&p);
            Ok(match std::fs::metadata(&host) {
                Err(e) => Err(e),
                Ok(md) if !md.is_dir() => Ok(None),
                Ok(_) => {
                    let mut snap = Snapshot::new();
                    scan(&host, "", recursive, &mut snap);
                    Ok(Some(snap))
                }
            })
        })
        .await
        .map_err(|e| RpcError::new("internal", e.to_string()))?;
    let snap = match first {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RpcError::new(
                "not_found",
                format!("path {path} not found: stat {path}: no such file or directory"),
            ));
        }
        Err(e) => {
            return Err(RpcError::new(
                "internal",
                format!("error statting path {path}: {e}"),
            ));
        }
        Ok(None) => {
            return Err(RpcError::new(
                "invalid_argument",
                format!("path {path} not a directory: %!w(<nil>)"),
            ));
        }
        Ok(Some(s)) => s,
    };
    let id = format!("{:016x}", crate::harness::clock::random_u64());
    let w = Arc::new(Watcher {
        events: Mutex::new(Vec::new()),
    });
    sbx.watchers
        .lock()
        .expect("watchers")
        .insert(id.clone(), w.clone());
    tokio::spawn(poll(
        Arc::downgrade(sbx),
        Arc::downgrade(&w),
        path,
        recursive,
        snap,
    ));
    Ok(json!({"watcherId": id}))
}

/// `GetWatcherEvents {watcherId}`: the events since the last call; an unknown id is
/// `not_found`.
pub(crate) fn events(sbx: &Sbx, v: &Value) -> Result<Value, RpcError> {
    let id = v
        .get("watcherId")
        .or_else(|| v.get("watcher_id"))
        .and_then(|i| i.as_str())
        .unwrap_or("");
    let w = sbx
        .watchers
        .lock()
        .expect("watchers")
        .get(id)
        .cloned()
        .ok_or_else(|| RpcError::new("not_found", format!("watcher with id {id} not found")))?;
    let events = std::mem::take(&mut *w.events.lock().expect("events"));
    Ok(if events.is_empty() {
        json!({})
    } else {
        json!({ "events": events })
    })
}

/// `RemoveWatcher {watcherId}`: `{}`; an unknown id is `not_found`.
pub(crate) fn remove(sbx: &Sbx, v: &Value) -> Result<Value, RpcError> {
    let id = v
        .get("watcherId")
        .or_else(|| v.get("watcher_id"))
        .and_then(|i| i.as_str())
        .unwrap_or("");
    sbx.watchers
        .lock()
        .expect("watchers")
        .remove(id)
        .map(|_| json!({}))
        .ok_or_else(|| RpcError::new("not_found", format!("watcher with id {id} not found")))
}
