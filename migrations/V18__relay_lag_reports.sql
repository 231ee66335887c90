-- The relay's own lag, shared with the service, the console and the alert rules (issue 48):
-- each streaming relay writes here, every 200 ms when it changed and every second anyway,
-- the commit time of the oldest transaction it read and Kafka has not yet acknowledged
-- (what `ra_relay_oldest_unconfirmed_commit_age_seconds` shows). `ledger serve` reads it
-- beside the slot: while the slot streams and the report is fresh, the age of the oldest
-- unpublished commit is this exact figure; otherwise it falls back to the bound the slot and
-- the retention marks give, and says it is a bound (ledger/src/lag/exact.rs).
--
-- UNLOGGED: a report is a reading of now, worth nothing after a crash or on a standby, and
-- writing it must not put a transaction in the WAL five times a second (every slot would
-- decode it, and relay_slots, which is restored with the data, keeps the history checks'
-- counts). A crash empties the table; the service then says "bound" until the relay
-- reports again.
CREATE UNLOGGED TABLE relay_lag_reports (
    slot_name                    text        PRIMARY KEY,
    -- Commit time of the oldest transaction the relay read and has not confirmed; NULL when
    -- everything it read is confirmed.
    oldest_unconfirmed_commit_at timestamptz,
    -- When the relay wrote this report (the database's clock).
    reported_at                  timestamptz NOT NULL,
    -- Why the relay stopped, when it refused to go on (a lost slot, a publication that
    -- stopped carrying the outbox, a position from another history): its own words, for
    -- the verdict; cleared by its next report while streaming.
    refused                      text
);

COMMENT ON TABLE relay_lag_reports IS
    'Each streaming relay''s oldest unconfirmed commit, written every 200 ms to 1 s; read by ledger serve for an exact lag.';

-- The relay roles (those `ledger grant relay` set up: they may insert into relay_slots) write
-- their reports; every role that may read the outbox may read them.
DO $$
DECLARE
    relay_role name;
BEGIN
    FOR relay_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'relay_slots' AND privilege_type = 'INSERT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON relay_lag_reports TO %I', relay_role);
    END LOOP;
    FOR relay_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'lag_samples' AND privilege_type = 'SELECT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format('GRANT SELECT ON relay_lag_reports TO %I', relay_role);
    END LOOP;
END $$;
