//! One replica: the store, the runner, and the loops that claim queued operations, run them,
//! renew their leases, forward cancels read from the store, and reconcile operations whose
//! owner's lease expired.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use execseam_chrono_contract::contract::{End, Record};
use execseam_chrono_contract::wire::{ExecuteRequest, Phase, Status, codes};
use tokio::sync::{Notify, Semaphore, watch};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::runner::{RunEnd, Runner};
use crate::store::{Detached, Guard, Store, StoreError, ms};
use execseam_core::BoxFuture;

/// The least time a taken-over command is given (to read the result of one that ended while no
/// server watched, or to end), even past its timeout.
const RESUME_GRACE: Duration = Duration::from_secs(5);

/// A replica.
pub struct Node {
    /// The configuration.
    pub config: Config,
    /// The store.
    pub store: Store,
    /// The runner.
    pub runner: Runner,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Permits for commands running at once on this replica.
    pub slots: Arc<Semaphore>,
    /// The open client connections.
    pub connections: Arc<crate::listen::Connections>,
    /// Cancel switches of the operations running here.
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Woken when an operation is submitted here.
    pub work: Notify,
    shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("replica", &self.config.replica_id)
            .finish_non_exhaustive()
    }
}

fn log_store(what: &str, e: &StoreError) {
    eprintln!("execseam serve: {what}: {e}");
}

/// The contract's end for a run's end.
pub fn end_of(run: RunEnd) -> End {
    run.end()
}

impl Node {
    /// A replica over `store` and `runner`.
    pub fn new(config: Config, store: Store, runner: Runner, metrics: Arc<Metrics>) -> Node {
        let limit = config
            .max_connections
            .unwrap_or_else(crate::listen::default_connection_limit);
        Node {
            slots: Arc::new(Semaphore::new(config.max_running)),
            connections: Arc::new(crate::listen::Connections::new(limit)),
            config,
            store,
            runner,
            metrics,
            running: Mutex::new(HashMap::new()),
            work: Notify::new(),
            shutdown: watch::channel(false).0,
        }
    }

    fn lease_until(&self) -> i64 {
        ms(SystemTime::now() + self.config.lease)
    }

    /// The timeout of a request.
    pub fn timeout(&self, req: &ExecuteRequest) -> Duration {
        Duration::from_secs(u64::from(
            req.timeout_secs.unwrap_or(self.config.default_timeout_secs),
        ))
    }

    /// Starts the loops.
    pub async fn start(self: &Arc<Node>) -> Result<(), StoreError> {
        if self.config.stable_replica_id {
            let n = self.store.drop_leases(&self.config.replica_id).await?;
            if n > 0 {
                eprintln!(
                    "execseam serve: {n} operation(s) held by this replica's previous run will be reconciled"
                );
            }
        }
        self.reconcile().await;
        let me = self.clone();
        tokio::spawn(async move { me.dispatch().await });
        let me = self.clone();
        tokio::spawn(async move { me.housekeeping().await });
        Ok(())
    }

    /// Stops the loops (operations running here go on until the process ends).
    pub fn stop(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Claims queued operations while there are free slots.
    async fn dispatch(self: Arc<Node>) {
        let mut stop = self.shutdown.subscribe();
        loop {
            if *stop.borrow() {
                return;
            }
            let free = self.slots.available_permits();
            let mut claimed = 0;
            if free > 0 {
                match self.store.queued(i64::try_from(free).unwrap_or(1)).await {
                    Ok(ids) => {
                        for id in ids {
                            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                                break;
                            };
                            match self
                                .store
                                .claim(
                                    &id,
                                    &self.config.replica_id,
                                    self.lease_until(),
                                    SystemTime::now(),
                                )
                                .await
                            {
                                Ok(true) => {
                                    claimed += 1;
                                    let me = self.clone();
                                    tokio::spawn(async move {
                                        me.drive(id).await;
                                        drop(permit);
                                        me.work.notify_one();
                                    });
                                }
                                Ok(false) => {}
                                Err(e) => log_store("claim", &e),
                            }
                        }
                    }
                    Err(e) => log_store("queue", &e),
                }
            }
            if claimed == 0 {
                tokio::select! {
                    () = self.work.notified() => {}
                    () = tokio::time::sleep(self.config.tick) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// Runs one claimed operation to its end.
    async fn drive(&self, id: String) {
        let guard = Guard::Lease(self.config.replica_id.clone());
        let op = match self.store.get(&id).await {
            Ok(Some(op)) => op,
            Ok(None) => return,
            Err(e) => return log_store("load", &e),
        };
        let Some(req) = op
            .request
            .as_deref()
            .and_then(|r| serde_json::from_str::<ExecuteRequest>(r).ok())
        else {
            let _ = self
                .store
                .update(&id, &guard, |r| {
                    r.finish(
                        End::Without {
                            status: Status::Failed,
                            code: codes::INTERNAL_ERROR,
                            message: "the stored request is unreadable".into(),
                        },
                        SystemTime::now(),
                    )
                })
                .await;
            return;
        };
        let cancelled = self.cancellable(&id, false);
        let store = self.store.clone();
        let started_guard = guard.clone();
        let started_id = id.clone();
        let me = self.config.replica_id.clone();
        // The program may run only once `running` is stored (and, for a detached start, its
        // handle before that): after a crash from here on, the operation is reattached where
        // a handle is stored, else reconciled as outcome_uncertain; never run again.
        let started = move |detached: Option<Detached>| async move {
            if let Some(d) = &detached {
                match store.set_detached(&started_id, &me, d).await {
                    Ok(true) => {}
                    _ => return false,
                }
            }
            match store
                .update(&started_id, &started_guard, |r| {
                    if !r.cancel_requested {
                        r.advance(Status::Running, Phase::Execute, SystemTime::now());
                    }
                })
                .await
            {
                Ok(Some(op)) => op.rec.status == Status::Running,
                _ => false,
            }
        };
        let _ = self
            .runner
            .run(
                &req,
                self.timeout(&req),
                cancelled,
                started,
                self.finisher(&id),
                true,
                None,
            )
            .await;
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Stores how the run of `id` ended (under this replica's lease), before its sandbox is
    /// destroyed.
    fn finisher(&self, id: &str) -> impl FnOnce(RunEnd) -> BoxFuture<'static, ()> + Send + 'static {
        let store = self.store.clone();
        let guard = Guard::Lease(self.config.replica_id.clone());
        let id = id.to_owned();
        move |end| {
            Box::pin(async move {
                let end = end_of(end);
                if let Err(e) = store
                    .update(&id, &guard, |r| {
                        r.advance(Status::Collecting, Phase::Collect, SystemTime::now());
                        r.finish(end.clone(), SystemTime::now());
                    })
                    .await
                {
                    log_store("finish", &e);
                }
            })
        }
    }

    /// Signals the local run of `id`, if it runs here.
    pub fn signal_cancel(&self, id: &str) {
        if let Some(tx) = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
        {
            let _ = tx.send(true);
        }
    }

    /// Requests the cancel of `id` (through the store: its owner, on any replica, sees it) and
    /// sets the absolute deadline once.
    pub async fn request_cancel(&self, id: &str) -> Result<Option<Record>, StoreError> {
        let now = SystemTime::now();
        let op = self
            .store
            .update(id, &Guard::None, |r| {
                if r.status == Status::Queued {
                    r.request_cancel(now);
                    r.finish(
                        End::Without {
                            status: Status::Cancelled,
                            code: codes::EXECUTION_CANCELLED,
                            message: "cancelled before it ran".into(),
                        },
                        now,
                    );
                } else {
                    r.request_cancel(now);
                }
            })
            .await?;
        if op.as_ref().is_some_and(|o| !o.rec.status.is_terminal()) {
            self.store
                .set_cancel_deadline(id, ms(now + self.config.cancel_deadline))
                .await?;
            self.signal_cancel(id);
        }
        Ok(op.map(|o| o.rec))
    }

    /// Leases, cancels from other replicas, expired leases, overdue cancels, garbage.
    async fn housekeeping(self: Arc<Node>) {
        let mut stop = self.shutdown.subscribe();
        let renew_every = self.config.lease / 3;
        let mut last_renew = std::time::Instant::now();
        let mut last_gc = std::time::Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.tick) => {}
                _ = stop.changed() => return,
            }
            if last_renew.elapsed() >= renew_every {
                last_renew = std::time::Instant::now();
                if let Err(e) = self
                    .store
                    .renew(&self.config.replica_id, self.lease_until())
                    .await
                {
                    log_store("renew", &e);
                }
            }
            match self.store.cancels_for(&self.config.replica_id).await {
                Ok(ids) => ids.iter().for_each(|id| self.signal_cancel(id)),
                Err(e) => log_store("cancels", &e),
            }
            self.reconcile().await;
            if last_gc.elapsed() >= Duration::from_secs(60) {
                last_gc = std::time::Instant::now();
                let before = SystemTime::now() - self.config.retention;
                if let Err(e) = self.store.collect_garbage(ms(before)).await {
                    log_store("garbage collection", &e);
                }
            }
        }
    }

    /// A started operation whose owner's lease expired, if its command was started detached
    /// (a handle is stored): take its lease and finish it by reattaching. `None`: no handle
    /// (reconcile it as uncertain); `Some(Ok(None))`: another replica took it.
    async fn take_over(
        self: &Arc<Node>,
        id: &str,
        now: SystemTime,
    ) -> Option<Result<Option<()>, StoreError>> {
        let op = match self.store.get(id).await {
            Ok(Some(op)) => op,
            Ok(None) => return Some(Ok(None)),
            Err(e) => return Some(Err(e)),
        };
        let d = op.detached.clone()?;
        match self
            .store
            .take_over(id, &self.config.replica_id, self.lease_until(), ms(now))
            .await
        {
            Ok(true) => {}
            Ok(false) => return Some(Ok(None)),
            Err(e) => return Some(Err(e)),
        }
        eprintln!("execseam serve: reattaching to the running command of an operation");
        let me = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move { me.resume(id, op, d).await });
        Some(Ok(Some(())))
    }

    /// Registers `id` as running here (`requested`: a cancel is already asked for); the future
    /// ends once a cancel of it is asked.
    fn cancellable(&self, id: &str, requested: bool) -> impl Future<Output = ()> + Send + use<> {
        let (tx, mut rx) = watch::channel(requested);
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned(), tx);
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Finishes a taken-over operation through [`Runner::resume`].
    async fn resume(&self, id: String, op: crate::store::Stored, d: Detached) {
        let req = op
            .request
            .as_deref()
            .and_then(|r| serde_json::from_str::<ExecuteRequest>(r).ok());
        let cancelled = self.cancellable(&id, op.rec.cancel_requested);
        let timeout = req.as_ref().map_or(
            Duration::from_secs(u64::from(self.config.default_timeout_secs)),
            |r| self.timeout(r),
        );
        let ran =
            Duration::from_millis(u64::try_from(ms(SystemTime::now()) - d.started_ms).unwrap_or(0));
        // What is left of the timeout, but at least RESUME_GRACE: a command that ended while no
        // server watched must have its result read, not be reported as timed out.
        let left = timeout.saturating_sub(ran).max(RESUME_GRACE);
        let _ = self
            .runner
            .resume(&d, left, cancelled, self.finisher(&id))
            .await;
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Operations whose owner's lease expired: not started yet → queued again; started with a
    /// stored process handle → taken over and finished by reattaching; started without one →
    /// `outcome_uncertain` (the command may have run: never run twice). Cancels past their
    /// absolute deadline → `outcome_uncertain`.
    pub async fn reconcile(self: &Arc<Node>) {
        let now = SystemTime::now();
        match self.store.expired_leases(ms(now)).await {
            Ok(list) => {
                for (id, status) in list {
                    let done = if status == Status::Provisioning {
                        self.store.requeue(&id, now).await.map(|b| b.then_some(()))
                    } else if let Some(taken) = self.take_over(&id, now).await {
                        taken
                    } else {
                        self.store
                            .update(&id, &Guard::LeaseExpired(ms(now)), |r| {
                                r.finish(
                                    End::Without {
                                        status: Status::OutcomeUncertain,
                                        code: codes::OUTCOME_UNCERTAIN,
                                        message: "the replica running it stopped; the program may have run".into(),
                                    },
                                    now,
                                )
                            })
                            .await
                            .map(|o| o.map(|_| ()))
                    };
                    match done {
                        Ok(Some(())) => {
                            self.metrics
                                .reconciled
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            self.work.notify_one();
                        }
                        Ok(None) => {}
                        Err(e) => log_store("reconcile", &e),
                    }
                }
            }
            Err(e) => log_store("reconcile", &e),
        }
        match self.store.overdue_cancels(ms(now)).await {
            Ok(ids) => {
                for id in ids {
                    let r = self
                        .store
                        .update(&id, &Guard::None, |r| {
                            r.finish(
                                End::Without {
                                    status: Status::OutcomeUncertain,
                                    code: codes::OUTCOME_UNCERTAIN,
                                    message: "the cancel deadline passed before the command was confirmed stopped".into(),
                                },
                                now,
                            )
                        })
                        .await;
                    if let Err(e) = r {
                        log_store("cancel deadline", &e);
                    }
                }
            }
            Err(e) => log_store("cancel deadline", &e),
        }
    }
}
