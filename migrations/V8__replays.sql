-- Replays: the ledger's events republished to a replay topic, for a team that joins late
-- (ledger/src/replay/mod.rs explains the handoff between the replayed past and the live
-- topic).

-- The transaction that appended each event. A replay's "past" is the set of events whose
-- transaction its recorded snapshot sees (pg_visible_in_snapshot), which stays decidable
-- after a restart, unlike a snapshot exported by a session that died. Events appended before
-- this migration have none: they committed before any replay could start (the ALTER waits
-- for appends in flight and holds off new ones), so every replay counts them in its past.
-- No volatile default here (that would rewrite the table); new rows get one below.
ALTER TABLE events ADD COLUMN txid xid8;
ALTER TABLE events ALTER COLUMN txid SET DEFAULT pg_current_xact_id();

CREATE TABLE replays (
    id                 uuid        PRIMARY KEY,
    -- requested: waiting for a runner; running: started (snapshot and offsets recorded);
    -- complete: every event published and the completion markers written; failed: stopped
    -- for good (error says why).
    status             text        NOT NULL DEFAULT 'requested'
                                   CHECK (status IN ('requested', 'running', 'complete', 'failed')),
    -- Selection. NULL means no restriction.
    aggregate_types    text[]      NOT NULL,
    event_types        text[],
    stream_prefix      text,
    recorded_from      timestamptz,
    recorded_to        timestamptz,
    CHECK (recorded_from IS NULL OR recorded_to IS NULL OR recorded_from < recorded_to),
    -- The live topics' prefix and the replay topics' name, `{live}` and `{id}` substituted.
    topic_prefix       text        NOT NULL,
    target_template    text        NOT NULL,
    -- Events per second, at most.
    rate               integer     NOT NULL CHECK (rate > 0),
    requested_by       text        NOT NULL,
    requested_at       timestamptz NOT NULL DEFAULT now(),
    -- Recorded when a runner starts it, in this order: the live topics' end offsets
    -- ({topic: {partition: offset}}), then the snapshot that defines the past, the highest
    -- position it sees and how many selected events it holds ({live topic: count} too).
    handoff            jsonb,
    snapshot           pg_snapshot,
    past_end_position  bigint,
    total_events       bigint,
    topic_events       jsonb,
    started_at         timestamptz,
    -- Checkpoint: every selected event at or below this position is acknowledged by Kafka.
    checkpoint         bigint      NOT NULL DEFAULT 0,
    published          bigint      NOT NULL DEFAULT 0,
    -- Runner starts (1 + resumes after a crash or a stop).
    attempts           integer     NOT NULL DEFAULT 0,
    progress_at        timestamptz,
    completed_at       timestamptz,
    error              text,
    CHECK ((status IN ('requested', 'failed')) OR snapshot IS NOT NULL)
);

CREATE INDEX replays_unfinished ON replays (requested_at) WHERE status IN ('requested', 'running');

COMMENT ON TABLE replays IS
    'Republishing of past events to a replay topic, with the live topics'' handoff offsets; resumable from checkpoint.';
