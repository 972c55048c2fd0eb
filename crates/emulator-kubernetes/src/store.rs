//! The object store: every object as JSON under one revision counter (etcd's), the history of
//! changes a watch replays, and the hub live watches read.
//!
//! Every write takes the next revision and sets it as the object's `metadata.resourceVersion`
//! (a decimal string, as etcd revisions are). A watch from revision N gets every change after N
//! from the history, then live ones; N older than the history is `410 Expired` ("too old
//! resource version: N (M)", the watch cache's text). Revision `0` or none replays the current
//! objects as `ADDED` first (`watch_cache.go`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::schema::Resource;
use crate::status::{self, ApiError};

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Created.
    Added,
    /// Written.
    Modified,
    /// Removed.
    Deleted,
}

impl ChangeKind {
    /// The watch event type.
    pub fn word(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One change.
#[derive(Clone, Debug)]
pub struct Change {
    /// Its revision.
    pub rev: u64,
    /// The resource.
    pub res: &'static Resource,
    /// The namespace (`""` for cluster-scoped).
    pub ns: String,
    /// The name.
    pub name: String,
    /// What happened.
    pub kind: ChangeKind,
    /// The object after (for a delete: its last state, with the delete's revision).
    pub object: Value,
    /// The object before (for selector transitions).
    pub previous: Option<Value>,
}

type Key = (&'static str, &'static str, String, String);

fn key(res: &'static Resource, ns: &str, name: &str) -> Key {
    (res.group, res.plural, ns.to_owned(), name.to_owned())
}

struct State {
    rev: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    capacity: usize,
}

/// The store.
pub struct Store {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Change>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// The current state (synthetic `ADDED`s), then live.
    Now,
    /// Every change after this revision.
    After(u64),
}

/// A watch's start: what to replay, then a live receiver.
pub struct Subscription {
    /// Changes to send first (or the current objects, as `ADDED`).
    pub backlog: Vec<Arc<Change>>,
    /// Live changes (filter them).
    pub live: broadcast::Receiver<Arc<Change>>,
}

/// A UTC timestamp `2006-01-02T15:04:05Z` (metav1.Time, whole seconds).
pub fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// `secs` since the epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Seconds since the epoch of an RFC 3339 time (`2026-01-01T00:00:00Z`, fractions and offsets
/// as Go's `time.RFC3339` reads them), if it parses.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        rest = &r[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        r if r.len() == 6 && (r.starts_with('+') || r.starts_with('-')) => {
            let sign = if r.starts_with('-') { -1 } else { 1 };
            sign * (r[1..3].parse::<i64>().ok()? * 3600 + r[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let t = days * 86_400 + h * 3600 + mi * 60 + se - offset;
    u64::try_from(t).ok()
}

impl Store {
    /// An empty store whose history keeps `capacity` changes; the revision starts at 1000 (a
    /// client must treat it as opaque).
    pub fn new(capacity: usize) -> Store {
        let (tx, _) = broadcast::channel(4096);
        Store {
            state: Mutex::new(State {
                rev: 1000,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                capacity: capacity.max(16),
            }),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.lock().rev
    }

    /// One object.
    pub fn get(&self, res: &'static Resource, ns: &str, name: &str) -> Option<Value> {
        self.lock().objects.get(&key(res, ns, name)).cloned()
    }

    /// Every object of `res` (in `ns`, or in every namespace), by name, with the revision.
    pub fn list(&self, res: &'static Resource, ns: Option<&str>) -> (Vec<Value>, u64) {
        let s = self.lock();
        let items = s
            .objects
            .iter()
            .filter(|((g, p, n, _), _)| {
                *g == res.group && *p == res.plural && ns.is_none_or(|ns| n == ns)
            })
            .map(|(_, v)| v.clone())
            .collect();
        (items, s.rev)
    }

    /// A new revision for `obj` (its `resourceVersion`), recorded as a `kind` change of the
    /// object `(res, ns, name)`.
    fn revise(
        &self,
        s: &mut State,
        (res, ns, name): (&'static Resource, &str, &str),
        kind: ChangeKind,
        obj: &mut Value,
        previous: Option<Value>,
    ) {
        s.rev += 1;
        obj["metadata"]["resourceVersion"] = json!(s.rev.to_string());
        let rev = s.rev;
        self.record(
            s,
            Change {
                rev,
                res,
                ns: ns.to_owned(),
                name: name.to_owned(),
                kind,
                object: obj.clone(),
                previous,
            },
        );
    }

    fn record(&self, s: &mut State, change: Change) {
        let change = Arc::new(change);
        if s.history.len() >= s.capacity {
            s.history.pop_front();
        }
        s.history.push_back(change.clone());
        let _ = self.tx.send(change);
    }

    /// Stores a new object (its metadata already complete but for the revision); an object of
    /// that name is `409 AlreadyExists`.
    pub fn create(
        &self,
        res: &'static Resource,
        ns: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let mut s = self.lock();
        let k = key(res, ns, &name);
        if s.objects.contains_key(&k) {
            return Err(status::already_exists(res, &name));
        }
        self.revise(&mut s, (res, ns, &name), ChangeKind::Added, &mut obj, None);
        s.objects.insert(k, obj.clone());
        Ok(obj)
    }

    /// Changes an object with `f` (which may refuse); a change that leaves it equal is not
    /// written (no new revision, no event), as the API server skips no-op updates.
    pub fn update(
        &self,
        res: &'static Resource,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value) -> Result<(), ApiError>,
    ) -> Result<Value, ApiError> {
        let mut s = self.lock();
        let k = key(res, ns, name);
        let Some(old) = s.objects.get(&k).cloned() else {
            return Err(status::not_found(res, name));
        };
        let mut new = old.clone();
        f(&mut new)?;
        // The name and the namespace cannot change.
        new["metadata"]["name"] = old["metadata"]["name"].clone();
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if new == old {
            return Ok(old);
        }
        self.revise(
            &mut s,
            (res, ns, name),
            ChangeKind::Modified,
            &mut new,
            Some(old),
        );
        s.objects.insert(k, new.clone());
        Ok(new)
    }

    /// Removes an object; its last state carries the delete's revision.
    pub fn remove(&self, res: &'static Resource, ns: &str, name: &str) -> Option<Value> {
        let mut s = self.lock();
        let mut obj = s.objects.remove(&key(res, ns, name))?;
        self.revise(&mut s, (res, ns, name), ChangeKind::Deleted, &mut obj, None);
        Some(obj)
    }

    /// Every object (of any resource) whose `ownerReferences` name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<(&'static Resource, String, String)> {
        let s = self.lock();
        s.objects
            .iter()
            .filter(|(_, v)| {
                v["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
            })
            .filter_map(|((g, p, ns, name), _)| {
                crate::schema::ALL
                    .iter()
                    .find(|r| r.group == *g && r.plural == *p)
                    .map(|r| (*r, ns.clone(), name.clone()))
            })
            .collect()
    }

    /// Starts a watch on `res` (in `ns`, or every namespace) `from`; a revision older than the
    /// history is `410 Expired`.
    pub fn watch(
        &self,
        res: &'static Resource,
        ns: Option<&str>,
        from: From,
    ) -> Result<Subscription, ApiError> {
        let s = self.lock();
        let live = self.tx.subscribe();
        let mine = |c: &Change| {
            c.res.group == res.group && c.res.plural == res.plural && ns.is_none_or(|n| c.ns == n)
        };
        let backlog = match from {
            From::Now => s
                .objects
                .iter()
                .filter(|((g, p, n, _), _)| {
                    *g == res.group && *p == res.plural && ns.is_none_or(|ns| n == ns)
                })
                .map(|((_, _, n, name), v)| {
                    Arc::new(Change {
                        rev: s.rev,
                        res,
                        ns: n.clone(),
                        name: name.clone(),
                        kind: ChangeKind::Added,
                        object: v.clone(),
                        previous: None,
                    })
                })
                .collect(),
            From::After(n) => {
                let oldest = s.history.front().map_or(s.rev, |c| c.rev);
                // Everything after n must still be in the history (or n is current).
                if n < s.rev && n + 1 < oldest {
                    return Err(status::expired(format!(
                        "too old resource version: {n} ({})",
                        oldest.saturating_sub(1)
                    )));
                }
                s.history
                    .iter()
                    .filter(|c| c.rev > n && mine(c))
                    .cloned()
                    .collect()
            }
        };
        Ok(Subscription { backlog, live })
    }

    /// Forgets the history (a test's compaction: every earlier revision is then too old).
    pub fn compact(&self) {
        self.lock().history.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::CLAIMS;

    fn claim(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {}})
    }

    #[tokio::test]
    async fn revisions_history_and_410() {
        let st = Store::new(16);
        let a = st.create(&CLAIMS, "d", claim("a")).unwrap();
        let rv: u64 = a["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(st.create(&CLAIMS, "d", claim("a")).unwrap_err().code == 409);
        let mut w = st.watch(&CLAIMS, Some("d"), From::After(rv)).unwrap();
        assert!(w.backlog.is_empty());
        st.update(&CLAIMS, "d", "a", |v| {
            v["spec"]["x"] = json!(1);
            Ok(())
        })
        .unwrap();
        // A no-op write makes no revision.
        let before = st.revision();
        st.update(&CLAIMS, "d", "a", |_| Ok(())).unwrap();
        assert_eq!(st.revision(), before);
        let c = w.live.recv().await.unwrap();
        assert_eq!((c.kind, c.rev), (ChangeKind::Modified, rv + 1));
        let replay = st.watch(&CLAIMS, Some("d"), From::After(rv)).unwrap();
        assert_eq!(replay.backlog.len(), 1);
        let now = st.watch(&CLAIMS, Some("d"), From::Now).unwrap();
        assert_eq!(now.backlog[0].kind, ChangeKind::Added);
        st.compact();
        st.remove(&CLAIMS, "d", "a").unwrap();
        let e = st.watch(&CLAIMS, Some("d"), From::After(rv)).err().unwrap();
        assert_eq!(e.code, 410);
        assert!(
            e.message.starts_with("too old resource version"),
            "{}",
            e.message
        );
    }

    #[test]
    fn times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_164_800), "2024-02-29T00:00:00Z");
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(
            parse_rfc3339("2024-02-29T01:00:00.123+01:00"),
            Some(1_709_164_800)
        );
        assert_eq!(parse_rfc3339("nope"), None);
    }
}
