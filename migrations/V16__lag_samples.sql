-- The console's lag history: `ledger serve` samples the relay's slot and the outbox every
-- retention round (ledger/src/lag/history.rs), for the pictures of the last hour and the
-- last day. One row per round's time bucket, so several services on one database write one
-- sample between them; rows older than a day are removed by the round that writes.
CREATE TABLE lag_samples (
    sampled_at      timestamptz      PRIMARY KEY,
    -- WAL bytes the slot has not confirmed; NULL when there is no slot or it confirmed nothing.
    lag_bytes       bigint,
    -- WAL bytes the slot keeps from being recycled (from its restart_lsn).
    retained_bytes  bigint,
    -- At most how long the oldest commit not yet published had waited; 0 when none waited.
    waited_seconds  double precision,
    -- The events table's highest position then: events appended per second, between two
    -- samples (positions are handed out at insert; a rolled-back append leaves a gap).
    events_position bigint           NOT NULL
);

COMMENT ON TABLE lag_samples IS
    'The relay''s lag sampled by ledger serve every retention round, kept one day, for the console''s pictures.';

-- The roles `ledger grant app` set up before this table existed may write it: they are the
-- roles that may take retention marks.
DO $$
DECLARE
    app_role name;
BEGIN
    FOR app_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'outbox_retention_marks' AND privilege_type = 'INSERT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON lag_samples TO %I', app_role);
    END LOOP;
END $$;
