//! The operation store: one table (`migrations/`), one code path over SQLite and PostgreSQL
//! (sqlx's `Any` driver, portable SQL, no compile-time-checked queries).
//!
//! Every change of an operation's contract state is a compare-and-set on its `version` (read,
//! apply a [`Record`] transition, `UPDATE … WHERE id = ? AND version = ?`, retry on a lost race),
//! so two replicas, or a worker and a cancel, never overwrite each other. A worker's writes are
//! also guarded by its lease (`AND lease_owner = ?`): once a survivor has reconciled an
//! operation, the old owner cannot write into it any more.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use execseam_chrono_contract::contract::Record;
use execseam_chrono_contract::wire::{CleanupStatus, ExecuteResponse, Failure, Phase, Status};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Executor, Row};

use crate::metrics::Metrics;

/// The statuses of operations that are not terminal, as SQL.
const ACTIVE: &str = "('queued','provisioning','preparing','running','collecting')";
/// The statuses of operations a worker holds (leased), as SQL.
const LEASED: &str = "('provisioning','preparing','running','collecting')";

const COLUMNS: &str = "id, owner, key_hash, payload_hash, request, status, phase, cleanup, version, \
    cancel_requested, cancel_deadline_ms, created_ms, updated_ms, expires_ms, terminal_ms, \
    first_event_ms, last_event_ms, failure_code, failure_message, result, lease_owner, \
    lease_expires_ms, sandbox_id, process_handle, started_ms";

/// A store failure (the database is unreachable, a query failed). Its text names the operation
/// that failed, never a value.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

fn db(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| StoreError(format!("store: {what}: {}", describe(&e)))
}

/// A database error's text without the query's values (sqlx errors may quote a row).
fn describe(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(d) => format!("database error {}", d.code().unwrap_or_default()),
        sqlx::Error::Io(io) => format!("I/O error: {}", io.kind()),
        sqlx::Error::PoolTimedOut => "timed out waiting for a connection".into(),
        sqlx::Error::PoolClosed => "the pool is closed".into(),
        sqlx::Error::RowNotFound => "no row".into(),
        sqlx::Error::Configuration(_) => "invalid store URL or options".into(),
        sqlx::Error::Migrate(m) => format!("migration failed: {m}"),
        // No variant but `Database` quotes row data.
        other => other.to_string(),
    }
}

/// Which database is behind the URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://path` (one node).
    Sqlite,
    /// `postgres://…` (one or several replicas).
    Postgres,
}

/// One operation as stored: its contract [`Record`] and what the server keeps besides.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The contract state.
    pub rec: Record,
    /// The submitted body (JSON), kept until the operation is terminal.
    pub request: Option<String>,
    /// The result body exactly as stored (served byte for byte).
    pub result_json: Option<String>,
    /// The replica holding the operation.
    pub lease_owner: Option<String>,
    /// Until when (ms since the epoch) its lease holds.
    pub lease_expires_ms: Option<i64>,
    /// The absolute cancel deadline (ms since the epoch), set by the first cancel.
    pub cancel_deadline_ms: Option<i64>,
    /// Where the command runs and its [`execseam_core::ProcessHandle`], stored before it starts
    /// (adapters with `Reattach` only).
    pub detached: Option<Detached>,
}

/// A command started detached: enough for any replica to reattach to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detached {
    /// The sandbox it runs in.
    pub sandbox_id: String,
    /// The adapter's handle token.
    pub handle: String,
    /// When it was started (ms since the epoch); the timeout counts from here.
    pub started_ms: i64,
}

/// What a submit found.
#[derive(Debug)]
pub enum Submitted {
    /// A new operation.
    Created(Box<Stored>),
    /// The same owner, key and payload: the existing operation.
    Replayed(Box<Stored>),
    /// The same owner and key with another payload.
    Conflict,
    /// Too many active operations.
    Full,
}

/// An extra condition on a compare-and-set.
#[derive(Clone, Debug)]
pub enum Guard {
    /// None beyond the version.
    None,
    /// The caller's lease: `lease_owner` is this replica.
    Lease(String),
    /// The lease has expired at this time (ms).
    LeaseExpired(i64),
}

/// The store.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the epoch.
pub fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn from_ms(v: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

fn name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn parse_name<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| StoreError(format!("store: unknown enum value {s:?} in a row")))
}

/// The migrations, embedded.
pub fn migrator() -> Migrator {
    Migrator {
        migrations: Cow::Owned(vec![
            Migration::new(
                1,
                Cow::Borrowed("operations"),
                MigrationType::Simple,
                Cow::Borrowed(include_str!("../migrations/0001_operations.sql")),
                false,
            ),
            Migration::new(
                2,
                Cow::Borrowed("process handle"),
                MigrationType::Simple,
                Cow::Borrowed(include_str!("../migrations/0002_process_handle.sql")),
                false,
            ),
        ]),
        ignore_missing: false,
        locking: true,
        no_tx: false,
    }
}

impl Store {
    /// Opens (and for SQLite creates) the store at `url` and runs the migrations.
    /// `sqlite://PATH` or `sqlite::memory:`; `postgres://…` (or `postgresql://`).
    pub async fn open(url: &str, metrics: Arc<Metrics>) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let (backend, url) = if url.starts_with("sqlite:") {
            let u = if url.contains('?') || url.contains(":memory:") {
                url.to_owned()
            } else {
                format!("{url}?mode=rwc")
            };
            (Backend::Sqlite, u)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_owned())
        } else {
            return Err(StoreError(
                "store: the URL must start with sqlite: or postgres://".into(),
            ));
        };
        let mut options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(30));
        options = match backend {
            Backend::Sqlite => options
                .max_connections(if url.contains(":memory:") { 1 } else { 8 })
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        // WAL: readers do not block the writer; NORMAL is durable against a
                        // killed process (a committed transaction is in the WAL file).
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                        conn.execute("PRAGMA busy_timeout = 30000").await?;
                        Ok(())
                    })
                }),
            Backend::Postgres => options.max_connections(16),
        };
        let pool = options.connect(&url).await.map_err(db("connect"))?;
        migrator().run(&pool).await.map_err(|e| {
            StoreError(format!(
                "store: migration failed: {}",
                match &e {
                    sqlx::migrate::MigrateError::Execute(inner) => describe(inner),
                    other => other.to_string(),
                }
            ))
        })?;
        Ok(Store {
            pool,
            backend,
            metrics,
        })
    }

    /// SQLite or PostgreSQL.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    async fn timed<T>(&self, f: impl Future<Output = T>) -> T {
        let t = Instant::now();
        let out = f.await;
        self.metrics.store_latency.observe(t.elapsed());
        out
    }

    fn row(r: &AnyRow) -> Result<Stored, StoreError> {
        let g = |e: sqlx::Error| StoreError(format!("store: reading a row: {}", describe(&e)));
        let opt_ms = |c: &str| -> Result<Option<SystemTime>, StoreError> {
            Ok(r.try_get::<Option<i64>, _>(c).map_err(g)?.map(from_ms))
        };
        let result_json: Option<String> = r.try_get("result").map_err(g)?;
        let result = match &result_json {
            Some(j) => Some(serde_json::from_str::<ExecuteResponse>(j).map_err(|_| {
                StoreError("store: a stored result is not a valid result body".into())
            })?),
            None => None,
        };
        let failure = match r.try_get::<Option<String>, _>("failure_code").map_err(g)? {
            Some(code) => Some(Failure {
                code,
                message: r.try_get("failure_message").map_err(g)?,
            }),
            None => None,
        };
        let rec = Record {
            id: r.try_get("id").map_err(g)?,
            owner: r.try_get("owner").map_err(g)?,
            key_hash: r.try_get("key_hash").map_err(g)?,
            payload_hash: r.try_get("payload_hash").map_err(g)?,
            status: parse_name::<Status>(&r.try_get::<String, _>("status").map_err(g)?)?,
            phase: parse_name::<Phase>(&r.try_get::<String, _>("phase").map_err(g)?)?,
            cleanup: parse_name::<CleanupStatus>(&r.try_get::<String, _>("cleanup").map_err(g)?)?,
            version: r.try_get("version").map_err(g)?,
            cancel_requested: r.try_get::<i64, _>("cancel_requested").map_err(g)? != 0,
            created: from_ms(r.try_get("created_ms").map_err(g)?),
            updated: from_ms(r.try_get("updated_ms").map_err(g)?),
            expires: from_ms(r.try_get("expires_ms").map_err(g)?),
            terminal_at: opt_ms("terminal_ms")?,
            first_event_at: opt_ms("first_event_ms")?,
            last_event_at: opt_ms("last_event_ms")?,
            failure,
            result,
        };
        Ok(Stored {
            rec,
            request: r.try_get("request").map_err(g)?,
            result_json,
            lease_owner: r.try_get("lease_owner").map_err(g)?,
            lease_expires_ms: r.try_get("lease_expires_ms").map_err(g)?,
            cancel_deadline_ms: r.try_get("cancel_deadline_ms").map_err(g)?,
            detached: match (
                r.try_get::<Option<String>, _>("sandbox_id").map_err(g)?,
                r.try_get::<Option<String>, _>("process_handle")
                    .map_err(g)?,
                r.try_get::<Option<i64>, _>("started_ms").map_err(g)?,
            ) {
                (Some(sandbox_id), Some(handle), Some(started_ms)) => Some(Detached {
                    sandbox_id,
                    handle,
                    started_ms,
                }),
                _ => None,
            },
        })
    }

    /// The operation `id`, if stored.
    pub async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM operations WHERE id = $1");
        let row = self
            .timed(
                sqlx::query(&sql)
                    .bind(id.to_owned())
                    .fetch_optional(&self.pool),
            )
            .await
            .map_err(db("get"))?;
        row.as_ref().map(Store::row).transpose()
    }

    async fn by_key(&self, owner: &str, key_hash: &str) -> Result<Option<Stored>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM operations WHERE owner = $1 AND key_hash = $2");
        let row = self
            .timed(
                sqlx::query(&sql)
                    .bind(owner.to_owned())
                    .bind(key_hash.to_owned())
                    .fetch_optional(&self.pool),
            )
            .await
            .map_err(db("lookup by key"))?;
        row.as_ref().map(Store::row).transpose()
    }

    /// Operations not yet terminal, on every replica.
    pub async fn active_count(&self) -> Result<i64, StoreError> {
        let sql = format!("SELECT COUNT(*) AS n FROM operations WHERE status IN {ACTIVE}");
        let row = self
            .timed(sqlx::query(&sql).fetch_one(&self.pool))
            .await
            .map_err(db("count"))?;
        row.try_get::<i64, _>("n").map_err(db("count"))
    }

    /// Operations by status (for `/metrics`).
    pub async fn counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = self
            .timed(
                sqlx::query("SELECT status, COUNT(*) AS n FROM operations GROUP BY status")
                    .fetch_all(&self.pool),
            )
            .await
            .map_err(db("counts"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>("status").map_err(db("counts"))?,
                    r.try_get::<i64, _>("n").map_err(db("counts"))?,
                ))
            })
            .collect()
    }

    /// Submits `fresh` (with its body `request`) under its owner and key hash: creates it, or
    /// finds the operation already there (the idempotency decision of the contract).
    pub async fn submit(
        &self,
        fresh: Record,
        request: &str,
        max_active: usize,
        now: SystemTime,
    ) -> Result<Submitted, StoreError> {
        for _ in 0..8 {
            if let Some(existing) = self.by_key(&fresh.owner, &fresh.key_hash).await? {
                if existing.rec.is_expired(now) {
                    // An expired operation no longer binds its key.
                    self.timed(
                        sqlx::query("DELETE FROM operations WHERE id = $1 AND expires_ms <= $2")
                            .bind(existing.rec.id.clone())
                            .bind(ms(now))
                            .execute(&self.pool),
                    )
                    .await
                    .map_err(db("delete expired"))?;
                    continue;
                }
                return Ok(if existing.rec.payload_hash == fresh.payload_hash {
                    Submitted::Replayed(Box::new(existing))
                } else {
                    Submitted::Conflict
                });
            }
            if self.active_count().await? >= i64::try_from(max_active).unwrap_or(i64::MAX) {
                return Ok(Submitted::Full);
            }
            let r = &fresh;
            let done = self
                .timed(
                    sqlx::query(
                        "INSERT INTO operations (id, owner, key_hash, payload_hash, request, status, \
                         phase, cleanup, version, cancel_requested, created_ms, updated_ms, expires_ms) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, $11, $12) \
                         ON CONFLICT (owner, key_hash) DO NOTHING",
                    )
                    .bind(r.id.clone())
                    .bind(r.owner.clone())
                    .bind(r.key_hash.clone())
                    .bind(r.payload_hash.clone())
                    .bind(request.to_owned())
                    .bind(name(&r.status))
                    .bind(name(&r.phase))
                    .bind(name(&r.cleanup))
                    .bind(r.version)
                    .bind(ms(r.created))
                    .bind(ms(r.updated))
                    .bind(ms(r.expires))
                    .execute(&self.pool),
                )
                .await
                .map_err(db("insert"))?;
            if done.rows_affected() == 1 {
                return Ok(Submitted::Created(Box::new(Stored {
                    rec: fresh,
                    request: Some(request.to_owned()),
                    result_json: None,
                    lease_owner: None,
                    lease_expires_ms: None,
                    cancel_deadline_ms: None,
                    detached: None,
                })));
            }
            // A concurrent submit with the same key won: decide against its row.
        }
        Err(StoreError("store: submit did not settle".into()))
    }

    /// Applies `f` to the operation's record and stores the result if it changed
    /// (compare-and-set on the version, retried on a lost race, under `guard`). `None`: no such
    /// operation, or the guard does not hold.
    pub async fn update(
        &self,
        id: &str,
        guard: &Guard,
        mut f: impl FnMut(&mut Record),
    ) -> Result<Option<Stored>, StoreError> {
        loop {
            let Some(mut op) = self.get(id).await? else {
                return Ok(None);
            };
            match guard {
                Guard::None => {}
                Guard::Lease(me) if op.lease_owner.as_deref() == Some(me.as_str()) => {}
                Guard::LeaseExpired(now) if op.lease_expires_ms.is_some_and(|t| t < *now) => {}
                _ => return Ok(None),
            }
            let before = op.rec.clone();
            f(&mut op.rec);
            if op.rec == before {
                return Ok(Some(op));
            }
            let r = &op.rec;
            if before.result.is_none() && r.result.is_some() {
                op.result_json = r
                    .result
                    .as_ref()
                    .map(|b| serde_json::to_string(b).expect("a result serialises"));
            }
            if r.status.is_terminal() {
                // The source is not kept once it cannot run any more.
                op.request = None;
            }
            let (extra, bind_owner, bind_time) = match guard {
                Guard::None => ("", None, None),
                Guard::Lease(me) => (" AND lease_owner = $17", Some(me.clone()), None),
                Guard::LeaseExpired(now) => (" AND lease_expires_ms < $17", None, Some(*now)),
            };
            let sql = format!(
                "UPDATE operations SET status = $1, phase = $2, cleanup = $3, version = $4, \
                 cancel_requested = $5, updated_ms = $6, terminal_ms = $7, first_event_ms = $8, \
                 last_event_ms = $9, failure_code = $10, failure_message = $11, result = $12, \
                 request = $13, expires_ms = $14 WHERE id = $15 AND version = $16{extra}"
            );
            let mut q = sqlx::query(&sql)
                .bind(name(&r.status))
                .bind(name(&r.phase))
                .bind(name(&r.cleanup))
                .bind(r.version)
                .bind(i64::from(r.cancel_requested))
                .bind(ms(r.updated))
                .bind(r.terminal_at.map(ms))
                .bind(r.first_event_at.map(ms))
                .bind(r.last_event_at.map(ms))
                .bind(r.failure.as_ref().map(|f| f.code.clone()))
                .bind(r.failure.as_ref().and_then(|f| f.message.clone()))
                .bind(op.result_json.clone())
                .bind(op.request.clone())
                .bind(ms(r.expires))
                .bind(r.id.clone())
                .bind(before.version);
            if let Some(o) = bind_owner {
                q = q.bind(o);
            }
            if let Some(t) = bind_time {
                q = q.bind(t);
            }
            let done = self
                .timed(q.execute(&self.pool))
                .await
                .map_err(db("update"))?;
            if done.rows_affected() == 1 {
                return Ok(Some(op));
            }
        }
    }

    /// Sets the absolute cancel deadline unless one is set already (a redelivered cancel never
    /// moves it).
    pub async fn set_cancel_deadline(&self, id: &str, deadline_ms: i64) -> Result<(), StoreError> {
        self.timed(
            sqlx::query(
                "UPDATE operations SET cancel_deadline_ms = $1 \
                 WHERE id = $2 AND cancel_deadline_ms IS NULL",
            )
            .bind(deadline_ms)
            .bind(id.to_owned())
            .execute(&self.pool),
        )
        .await
        .map_err(db("cancel deadline"))?;
        Ok(())
    }

    /// Up to `limit` queued operations, oldest first, that nobody has asked to cancel.
    pub async fn queued(&self, limit: i64) -> Result<Vec<String>, StoreError> {
        self.ids(
            "SELECT id FROM operations WHERE status = 'queued' AND cancel_requested = 0 \
             ORDER BY created_ms LIMIT $1",
            Some(limit),
            None,
            "queued",
        )
        .await
    }

    async fn ids(
        &self,
        sql: &str,
        n: Option<i64>,
        s: Option<String>,
        what: &'static str,
    ) -> Result<Vec<String>, StoreError> {
        let mut q = sqlx::query(sql);
        if let Some(n) = n {
            q = q.bind(n);
        }
        if let Some(s) = s {
            q = q.bind(s);
        }
        let rows = self
            .timed(q.fetch_all(&self.pool))
            .await
            .map_err(db(what))?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("id").map_err(db(what)))
            .collect()
    }

    /// Claims the queued operation `id` for `replica` until `lease_until` (ms): it moves to
    /// `provisioning`. False if another replica (or a cancel) got there first.
    pub async fn claim(
        &self,
        id: &str,
        replica: &str,
        lease_until: i64,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        let done = self
            .timed(
                sqlx::query(
                    "UPDATE operations SET status = 'provisioning', phase = 'sandbox_create', \
                     version = version + 1, updated_ms = $1, lease_owner = $2, lease_expires_ms = $3 \
                     WHERE id = $4 AND status = 'queued' AND cancel_requested = 0",
                )
                .bind(ms(now))
                .bind(replica.to_owned())
                .bind(lease_until)
                .bind(id.to_owned())
                .execute(&self.pool),
            )
            .await
            .map_err(db("claim"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Extends every lease `replica` holds on an active operation.
    pub async fn renew(&self, replica: &str, lease_until: i64) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE operations SET lease_expires_ms = $1 WHERE lease_owner = $2 AND status IN {LEASED}"
        );
        self.timed(
            sqlx::query(&sql)
                .bind(lease_until)
                .bind(replica.to_owned())
                .execute(&self.pool),
        )
        .await
        .map_err(db("renew"))?;
        Ok(())
    }

    /// Ends at once the leases `replica` holds (a restarted replica with a stable id: whatever
    /// it held belongs to a process that is gone).
    pub async fn drop_leases(&self, replica: &str) -> Result<u64, StoreError> {
        let sql = format!(
            "UPDATE operations SET lease_expires_ms = 0 WHERE lease_owner = $1 AND status IN {LEASED}"
        );
        let done = self
            .timed(
                sqlx::query(&sql)
                    .bind(replica.to_owned())
                    .execute(&self.pool),
            )
            .await
            .map_err(db("drop leases"))?;
        Ok(done.rows_affected())
    }

    /// Active operations leased by `replica` with a cancel requested.
    pub async fn cancels_for(&self, replica: &str) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT id FROM operations WHERE cancel_requested = 1 AND status IN {LEASED} \
             AND lease_owner = $1"
        );
        self.ids(&sql, None, Some(replica.to_owned()), "cancels")
            .await
    }

    /// Leased operations whose lease expired before `now_ms`, with their status.
    pub async fn expired_leases(&self, now_ms: i64) -> Result<Vec<(String, Status)>, StoreError> {
        let sql = format!(
            "SELECT id, status FROM operations WHERE status IN {LEASED} AND lease_expires_ms < $1"
        );
        let rows = self
            .timed(sqlx::query(&sql).bind(now_ms).fetch_all(&self.pool))
            .await
            .map_err(db("expired leases"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>("id").map_err(db("expired leases"))?,
                    parse_name::<Status>(
                        &r.try_get::<String, _>("status")
                            .map_err(db("expired leases"))?,
                    )?,
                ))
            })
            .collect()
    }

    /// Stores where and under which handle the command of `id` is about to start, while
    /// `replica` holds its lease. False if it does not any more.
    pub async fn set_detached(
        &self,
        id: &str,
        replica: &str,
        d: &Detached,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE operations SET sandbox_id = $1, process_handle = $2, started_ms = $3 \
             WHERE id = $4 AND lease_owner = $5 AND status IN {LEASED}"
        );
        let done = self
            .timed(
                sqlx::query(&sql)
                    .bind(d.sandbox_id.clone())
                    .bind(d.handle.clone())
                    .bind(d.started_ms)
                    .bind(id.to_owned())
                    .bind(replica.to_owned())
                    .execute(&self.pool),
            )
            .await
            .map_err(db("store the process handle"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Takes over the started operation `id` whose lease expired before `now_ms`: `replica`
    /// holds it until `lease_until`. False if another replica got there first (its lease is
    /// no longer expired) or it ended. The contract state (and version) is unchanged.
    pub async fn take_over(
        &self,
        id: &str,
        replica: &str,
        lease_until: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE operations SET lease_owner = $1, lease_expires_ms = $2 \
             WHERE id = $3 AND status IN {LEASED} AND lease_expires_ms < $4"
        );
        let done = self
            .timed(
                sqlx::query(&sql)
                    .bind(replica.to_owned())
                    .bind(lease_until)
                    .bind(id.to_owned())
                    .bind(now_ms)
                    .execute(&self.pool),
            )
            .await
            .map_err(db("take over"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Puts an operation whose owner died before its program started back in the queue.
    pub async fn requeue(&self, id: &str, now: SystemTime) -> Result<bool, StoreError> {
        let done = self
            .timed(
                sqlx::query(
                    "UPDATE operations SET status = 'queued', phase = 'queued', version = version + 1, \
                     updated_ms = $1, lease_owner = NULL, lease_expires_ms = NULL, sandbox_id = NULL, \
                     process_handle = NULL, started_ms = NULL \
                     WHERE id = $2 AND status = 'provisioning' AND lease_expires_ms < $3",
                )
                .bind(ms(now))
                .bind(id.to_owned())
                .bind(ms(now))
                .execute(&self.pool),
            )
            .await
            .map_err(db("requeue"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Active operations with a cancel whose absolute deadline passed before `now_ms`.
    pub async fn overdue_cancels(&self, now_ms: i64) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT id FROM operations WHERE cancel_requested = 1 AND status IN {ACTIVE} \
             AND cancel_deadline_ms < $1"
        );
        self.ids(&sql, Some(now_ms), None, "overdue cancels").await
    }

    /// Deletes operations that expired before `before_ms`.
    pub async fn collect_garbage(&self, before_ms: i64) -> Result<u64, StoreError> {
        let done = self
            .timed(
                sqlx::query("DELETE FROM operations WHERE expires_ms < $1")
                    .bind(before_ms)
                    .execute(&self.pool),
            )
            .await
            .map_err(db("garbage collection"))?;
        Ok(done.rows_affected())
    }

    /// The store answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.timed(sqlx::query("SELECT 1 AS one").fetch_one(&self.pool))
            .await
            .map_err(db("ping"))?;
        Ok(())
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}
