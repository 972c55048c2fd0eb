//! The in-memory operation store: lost on restart, as Chrono's single-replica ephemeral store is
//! (seed 004: "a sandbox process restart loses operations and retained results"). It only
//! stores; every rule is in [`super::contract`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};

use super::contract::{Record, SubmitDecision, decide_submit};

struct Slot {
    record: Record,
    cancel: watch::Sender<bool>,
}

#[derive(Default)]
struct Inner {
    ops: HashMap<String, Slot>,
    by_key: HashMap<(String, String), String>,
}

/// Operations by id, and by (owner, key hash).
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("operations", &self.inner.lock().expect("store").ops.len())
            .finish()
    }
}

/// What [`MemoryStore::submit`] did.
#[derive(Debug)]
pub enum Submitted {
    /// A new operation; start it.
    Created(Record, watch::Receiver<bool>),
    /// The same (owner, key, payload): this operation.
    Replayed(Record),
    /// The key is bound to another payload.
    Conflict,
    /// A new operation would exceed the capacity.
    Full,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Arc<MemoryStore> {
        Arc::new(MemoryStore::default())
    }

    /// Decides and, for a new operation, inserts it, atomically: two submits with the same
    /// (owner, key) never create two operations.
    /// A new operation is refused ([`Submitted::Full`]) when `capacity` operations are active.
    pub fn submit(
        &self,
        fresh: Record,
        key_hash: &str,
        now: SystemTime,
        capacity: usize,
    ) -> Submitted {
        let mut inner = self.inner.lock().expect("store");
        let index = (fresh.owner.clone(), key_hash.to_owned());
        let existing = inner.by_key.get(&index).and_then(|id| inner.ops.get(id));
        match decide_submit(existing.map(|s| &s.record), &fresh.payload_hash, now) {
            SubmitDecision::Replay(id) => Submitted::Replayed(inner.ops[&id].record.clone()),
            SubmitDecision::Conflict => Submitted::Conflict,
            SubmitDecision::Create
                if inner
                    .ops
                    .values()
                    .filter(|s| !s.record.status.is_terminal())
                    .count()
                    >= capacity =>
            {
                Submitted::Full
            }
            SubmitDecision::Create => {
                let (tx, rx) = watch::channel(false);
                let id = fresh.id.clone();
                inner.by_key.insert(index, id.clone());
                inner.ops.insert(
                    id,
                    Slot {
                        record: fresh.clone(),
                        cancel: tx,
                    },
                );
                Submitted::Created(fresh, rx)
            }
        }
    }

    /// A copy of the record.
    pub fn get(&self, id: &str) -> Option<Record> {
        self.inner
            .lock()
            .expect("store")
            .ops
            .get(id)
            .map(|s| s.record.clone())
    }

    /// Changes a record and wakes whoever waits for a change.
    pub fn update(&self, id: &str, f: impl FnOnce(&mut Record)) {
        if let Some(s) = self.inner.lock().expect("store").ops.get_mut(id) {
            f(&mut s.record);
        }
        self.changed.notify_waiters();
    }

    /// Records a cancel request and signals the runner.
    pub fn request_cancel(&self, id: &str, now: SystemTime) {
        if let Some(s) = self.inner.lock().expect("store").ops.get_mut(id)
            && s.record.request_cancel(now)
        {
            let _ = s.cancel.send(true);
        }
        self.changed.notify_waiters();
    }

    /// Waits until `id` is terminal, at most `limit`; returns the record then.
    pub async fn wait_terminal(&self, id: &str, limit: Duration) -> Option<Record> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            let r = self.get(id)?;
            if r.status.is_terminal() {
                return Some(r);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.get(id);
            }
        }
    }

    /// Forgets operations that expired more than `grace` ago (they answer 404 from then on).
    pub fn collect_garbage(&self, now: SystemTime, grace: Duration) {
        let mut inner = self.inner.lock().expect("store");
        let dead: Vec<String> = inner
            .ops
            .iter()
            .filter(|(_, s)| s.record.expires + grace <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in dead {
            if let Some(s) = inner.ops.remove(&id) {
                inner.by_key.remove(&(s.record.owner, s.record.key_hash));
            }
        }
    }

    /// Operations not yet terminal.
    pub fn active(&self) -> usize {
        self.inner
            .lock()
            .expect("store")
            .ops
            .values()
            .filter(|s| !s.record.status.is_terminal())
            .count()
    }
}
