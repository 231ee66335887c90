-- The end-to-end watcher's state (issue 55, item 7; ledger/src/watcher): what it proved
-- Kafka holds, where it reads each event topic's partitions from, and the committed events
-- it found missing. One watcher writes at a time (it holds an advisory lock); the service
-- reads watcher_progress and watcher_missing for the verdict and the console.
--
-- Logged tables: a restart, or a crash, resumes from here in bounded work. The watcher
-- writes one round's changes in one transaction, only when something changed.

-- The watermark: every event at or below this position is either on Kafka or listed in
-- watcher_missing (or parked, or was rolled back and never committed).
CREATE TABLE watcher_progress (
    singleton   boolean          PRIMARY KEY DEFAULT true CHECK (singleton),
    watermark   bigint           NOT NULL,
    -- When the last round ended (the database's clock), and the lag bound it used.
    round_at    timestamptz      NOT NULL,
    lag_bound_s double precision NOT NULL,
    -- How many times the watcher re-read the topics from their start because Kafka lost
    -- records it had counted (a topic re-created, records deleted), and why the last time.
    rescans     bigint           NOT NULL DEFAULT 0,
    last_rescan text
);

-- Per partition of an event topic: `resume` where a restart reads from (no record before it
-- is of an event above the watermark), `read_to` the offset read up to (the partition's end
-- going back below it means records were lost), `first` the log start the count began at (a
-- log start moved past it means records the watcher counted were removed).
CREATE TABLE watcher_partitions (
    topic     text    NOT NULL,
    partition integer NOT NULL,
    first     bigint  NOT NULL,
    resume    bigint  NOT NULL,
    read_to   bigint  NOT NULL,
    PRIMARY KEY (topic, partition)
);

-- Committed events older than the lag bound that Kafka does not hold (not parked). A row
-- goes once a record of the event is read again (republished, or the relay caught up).
CREATE TABLE watcher_missing (
    event_id uuid        PRIMARY KEY,
    position bigint      NOT NULL,
    found_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE watcher_missing IS
    'Committed events older than the watcher''s lag bound that no Kafka event topic holds (ledger/src/watcher).';

-- The watcher runs in `ledger serve`: the roles `ledger grant app` set up before these
-- tables existed (those that may take retention marks) may keep its state.
DO $$
DECLARE
    app_role name;
BEGIN
    FOR app_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'outbox_retention_marks' AND privilege_type = 'INSERT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON watcher_progress, watcher_partitions, watcher_missing TO %I',
            app_role);
    END LOOP;
END $$;
