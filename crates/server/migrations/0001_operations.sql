-- One row per operation of the /executions contract. Portable SQL: the same text runs on SQLite
-- and PostgreSQL (sqlx Any driver). Times are milliseconds since the Unix epoch; flags are 0/1.
CREATE TABLE operations (
    id                TEXT PRIMARY KEY,
    owner             TEXT NOT NULL,
    key_hash          TEXT NOT NULL,
    payload_hash      TEXT NOT NULL,
    -- the submitted body (language, script, timeout, env, input files); NULL once terminal
    request           TEXT,
    status            TEXT NOT NULL,
    phase             TEXT NOT NULL,
    cleanup           TEXT NOT NULL,
    version           BIGINT NOT NULL,
    cancel_requested  BIGINT NOT NULL DEFAULT 0,
    -- absolute, set by the first cancel and never moved by a later one
    cancel_deadline_ms BIGINT,
    created_ms        BIGINT NOT NULL,
    updated_ms        BIGINT NOT NULL,
    expires_ms        BIGINT NOT NULL,
    terminal_ms       BIGINT,
    first_event_ms    BIGINT,
    last_event_ms     BIGINT,
    failure_code      TEXT,
    failure_message   TEXT,
    -- the result body exactly as served by GET /executions/{id}/result
    result            TEXT,
    -- the replica running it and until when its lease holds
    lease_owner       TEXT,
    lease_expires_ms  BIGINT,
    UNIQUE (owner, key_hash)
);
CREATE INDEX operations_status ON operations (status, created_ms);
CREATE INDEX operations_lease ON operations (lease_owner, status);
