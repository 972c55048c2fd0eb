//! `filesystem.Filesystem` watchers: the polling API the synchronous SDK uses (`CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`; envd `services/filesystem/watch_sync.go`) and the
//! server stream the asynchronous SDK uses (`WatchDir`; envd `services/filesystem/watch.go`:
//! a `start` event once the watch is set up, then one `filesystem` event per operation,
//! `keepalive` after `Keepalive-Ping-Interval` seconds without one, and the stream's
//! `Connect-Timeout-Ms` ending it with `deadline_exceeded`). envd watches with fsnotify; the emulator scans the directory every 50 ms and
//! reports the differences as fsnotify would name them: a new entry `CREATE` (and `WRITE` when it
//! already has content), a changed size or modification time `WRITE`, a changed mode `CHMOD`, a
//! vanished entry `REMOVE` (a rename is a `REMOVE` and a `CREATE`). Names are relative to the
//! watched directory; `recursive` covers every level below it, otherwise only its entries.
//! `includeEntry` adds the entry's `EntryInfo` to `CREATE`, `WRITE` and `CHMOD` events when it
//! can still be stat-ed (envd `services/filesystem/utils.go` `opCarriesEntry`,
//! `eventEntryInfo`: best effort, never on `REMOVE`/`RENAME`).

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

fn diff(old: &Snapshot, new: &Snapshot, events: &mut Vec<(String, &'static str)>) {
    let ev = |name: &str, t: &'static str| (name.to_owned(), t);
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

/// What one watch looks at.
#[derive(Clone)]
struct Spec {
    path: String,
    recursive: bool,
    include_entry: bool,
}

impl Spec {
    fn of(v: &Value, user: &super::User) -> Spec {
        let flag = |json_name: &str, proto_name: &str| {
            super::connect::field(v, json_name, proto_name)
                .and_then(|r| r.as_bool())
                .unwrap_or(false)
        };
        Spec {
            path: resolve(v.get("path").and_then(|p| p.as_str()).unwrap_or(""), user),
            recursive: flag("recursive", "recursive"),
            include_entry: flag("includeEntry", "include_entry"),
        }
    }
}

/// One scan after `last`: the new snapshot and the events, as `FilesystemEvent` JSON.
async fn step(sbx: &Sbx, spec: &Spec, last: Snapshot) -> Option<(Snapshot, Vec<Value>)> {
    let spec = spec.clone();
    sbx.sandbox
        .fs(move |fs| {
            let mut now = Snapshot::new();
            scan(&fs.path(&spec.path), "", spec.recursive, &mut now);
            let mut pairs = Vec::new();
            diff(&last, &now, &mut pairs);
            let events = pairs
                .into_iter()
                .map(|(name, t)| {
                    let mut e = json!({"name": name, "type": t});
                    if spec.include_entry && t != "EVENT_TYPE_REMOVE" {
                        let full = format!("{}/{name}", spec.path.trim_end_matches('/'));
                        if let Ok(entry) = super::fs::stat_entry(fs, &full) {
                            e["entry"] = entry;
                        }
                    }
                    e
                })
                .collect();
            Ok((now, events))
        })
        .await
        .ok()
}

async fn poll(sbx: Weak<Sbx>, watcher: Weak<Watcher>, spec: Spec, mut last: Snapshot) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (Some(s), Some(w)) = (sbx.upgrade(), watcher.upgrade()) else {
            return;
        };
        let Some((now, events)) = step(&s, &spec, last).await else {
            return;
        };
        if !events.is_empty() {
            w.events.lock().expect("events").extend(events);
        }
        last = now;
    }
}

/// The checks both kinds of watch make before watching (envd `watch.go`, `watch_sync.go`): the
/// directory must exist (`not_found`) and be one (`invalid_argument`). Gives the first snapshot.
async fn first_snapshot(sbx: &Sbx, spec: &Spec) -> Result<Snapshot, RpcError> {
    let p = spec.path.clone();
    let path = spec.path.clone();
    let recursive = spec.recursive;
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
    match first {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RpcError::new(
            "not_found",
            format!("path {path} not found: stat {path}: no such file or directory"),
        )),
        Err(e) => Err(RpcError::new(
            "internal",
            format!("error statting path {path}: {e}"),
        )),
        Ok(None) => Err(RpcError::new(
            "invalid_argument",
            format!("path {path} not a directory: %!w(<nil>)"),
        )),
        Ok(Some(s)) => Ok(s),
    }
}

/// `CreateWatcher {path, recursive, includeEntry}`: answers `{watcherId}`.
pub(crate) async fn create(
    sbx: &Arc<Sbx>,
    v: &Value,
    headers: &http::HeaderMap,
) -> Result<Value, RpcError> {
    let user = user_of(headers).map_err(|m| RpcError::new("unauthenticated", m))?;
    let spec = Spec::of(v, &user);
    let snap = first_snapshot(sbx, &spec).await?;
    let id = format!("{:016x}", execseam_emulator_kit::clock::random_u64());
    let w = Arc::new(Watcher {
        events: Mutex::new(Vec::new()),
    });
    sbx.watchers
        .lock()
        .expect("watchers")
        .insert(id.clone(), w.clone());
    tokio::spawn(poll(Arc::downgrade(sbx), Arc::downgrade(&w), spec, snap));
    Ok(json!({"watcherId": id}))
}

/// The request's `watcherId` (or `watcher_id`), empty when absent.
fn watcher_id(v: &Value) -> &str {
    v.get("watcherId")
        .or_else(|| v.get("watcher_id"))
        .and_then(|i| i.as_str())
        .unwrap_or("")
}

/// `GetWatcherEvents {watcherId}`: the events since the last call; an unknown id is
/// `not_found`.
pub(crate) fn events(sbx: &Sbx, v: &Value) -> Result<Value, RpcError> {
    let id = watcher_id(v);
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
    let id = watcher_id(v);
    sbx.watchers
        .lock()
        .expect("watchers")
        .remove(id)
        .map(|_| json!({}))
        .ok_or_else(|| RpcError::new("not_found", format!("watcher with id {id} not found")))
}

/// `WatchDir {path, recursive, includeEntry}` (server stream, `application/connect+json`).
/// `WatchDirResponse`'s oneof `event` is on the message itself, so proto3 JSON flattens it:
/// `{"start":{}}`, `{"filesystem":{…}}`, `{"keepalive":{}}` (unlike `process.StartResponse`,
/// whose `event` is a message field).
/// Errors before the watch is set up end the stream at once, as connect-go sends a handler's
/// error (HTTP 200 and an end-stream error). The stream then runs until the client goes away,
/// the sandbox does (`unavailable`, as the other streams here), or `Connect-Timeout-Ms`
/// passes (`ctx.Err()` in `watch.go`: `deadline_exceeded`).
pub(crate) async fn watch_dir(mut req: super::EnvdRequest) -> axum::response::Response {
    use super::connect::{end_stream, message};
    let msgs = match super::process::read_stream_messages(&mut req).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let [msg] = msgs.as_slice() else {
        return super::process::failed_stream(&RpcError::new(
            "invalid_argument",
            format!("expected exactly one request message, got {}", msgs.len()),
        ));
    };
    let v = match super::connect::parse(msg) {
        Ok(v) => v,
        Err(e) => return super::process::failed_stream(&e),
    };
    let user = match user_of(&req.headers) {
        Ok(u) => u,
        Err(m) => return super::process::failed_stream(&RpcError::new("unauthenticated", m)),
    };
    let deadline = match super::process::connect_timeout(&req) {
        Ok(t) => t.map(|t| tokio::time::Instant::now() + t),
        Err(e) => return super::process::failed_stream(&e),
    };
    let keepalive = super::process::keepalive_of(&req);
    let spec = Spec::of(&v, &user);
    let snap = match first_snapshot(&req.sbx, &spec).await {
        Ok(s) => s,
        Err(e) => return super::process::failed_stream(&e),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let sbx = Arc::downgrade(&req.sbx);
    let mut gone = req.sbx.gone.subscribe();
    let lost = RpcError::new(
        "unavailable",
        format!(
            "the connection to sandbox {} ended before the stream completed",
            req.sbx.id
        ),
    );
    tokio::spawn(async move {
        macro_rules! send {
            ($b:expr) => {
                if tx.send(Ok($b)).await.is_err() {
                    return;
                }
            };
        }
        send!(message(&json!({"start": {}})));
        let mut last = snap;
        let mut ping_at = tokio::time::Instant::now() + keepalive;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = tx.closed() => return,
                () = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let e = RpcError::new("deadline_exceeded", "context deadline exceeded");
                    let _ = tx.send(Ok(end_stream(Some(&e)))).await;
                    return;
                }
                ok = async { gone.wait_for(|g| *g).await.is_ok() } => {
                    if ok {
                        let _ = tx.send(Ok(end_stream(Some(&lost)))).await;
                    }
                    return;
                }
                () = tokio::time::sleep_until(ping_at) => {
                    send!(message(&json!({"keepalive": {}})));
                    ping_at = tokio::time::Instant::now() + keepalive;
                }
                _ = tick.tick() => {
                    let Some(s) = sbx.upgrade() else {
                        let _ = tx.send(Ok(end_stream(Some(&lost)))).await;
                        return;
                    };
                    let Some((now, events)) = step(&s, &spec, last).await else {
                        let _ = tx.send(Ok(end_stream(Some(&lost)))).await;
                        return;
                    };
                    drop(s);
                    last = now;
                    for e in events {
                        send!(message(&json!({"filesystem": e})));
                        ping_at = tokio::time::Instant::now() + keepalive;
                    }
                }
            }
        }
    });
    super::process::streaming(rx)
}
