-- Reattach (execseam_core::Reattach): where a running operation's command runs, under which
-- handle, and since when (the timeout is counted from there after a takeover). Stored before the
-- command starts; NULL for adapters that cannot reattach.
ALTER TABLE operations ADD COLUMN sandbox_id TEXT;
ALTER TABLE operations ADD COLUMN process_handle TEXT;
ALTER TABLE operations ADD COLUMN started_ms BIGINT;
