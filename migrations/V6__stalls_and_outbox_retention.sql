-- Chains that heal themselves: a worker that finds a run without progress for too long
-- re-raises the page the run waits for, and counts it here.
ALTER TABLE reassignment_runs ADD COLUMN stalls integer NOT NULL DEFAULT 0;

-- Outbox retention. A row may be removed once the relay's slot has confirmed a position
-- past its commit, and never before. Rows do not know their commit LSN, so retention works
-- with marks: a mark records the oldest transaction still running (`oldest_xact`, from a
-- snapshot), then the outbox's highest id handed out so far (`max_id`) and the WAL insert
-- position (`lsn`). Every transaction older than `oldest_xact` had finished, so it took its
-- ids before `max_id` was read and committed before `lsn`. Once the slot confirms `lsn`,
-- every outbox row with `id <= max_id` inserted by a transaction older than `oldest_xact`
-- has been published. (`max_id` only bounds the scan; it decides nothing.)
--
-- `txid` is the inserting transaction's id, recorded with the row (64-bit, so comparisons
-- never wrap).
ALTER TABLE outbox ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE TABLE outbox_retention_marks (
    taken_at    timestamptz NOT NULL DEFAULT now(),
    oldest_xact xid8        NOT NULL,
    max_id      bigint      NOT NULL,
    lsn         pg_lsn      NOT NULL PRIMARY KEY
);

COMMENT ON TABLE outbox_retention_marks IS
    'Points from which outbox rows may be removed once the relay''s slot confirms lsn: rows with id <= max_id and txid < oldest_xact.';
