-- An operator may cancel a replay (issue 35, item 8): `cancelled` ends it where it stands
-- and frees its place among the replays open at once (ledger/src/replay/cancel.rs); who
-- cancelled it and when are kept. A replay cancelled before a runner started it has no
-- snapshot.
ALTER TABLE replays
    ADD COLUMN cancelled_by text,
    ADD COLUMN cancelled_at timestamptz,
    DROP CONSTRAINT replays_status_check,
    ADD CONSTRAINT replays_status_check
        CHECK (status IN ('requested', 'running', 'complete', 'failed', 'cancelled')),
    DROP CONSTRAINT replays_check1,
    ADD CONSTRAINT replays_started_has_snapshot
        CHECK (status IN ('requested', 'failed', 'cancelled') OR snapshot IS NOT NULL),
    ADD CONSTRAINT replays_cancel_recorded
        CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL AND cancelled_by IS NOT NULL));
