-- Messages Kafka refused for good (for example larger than the broker's maximum message
-- size). The relay parks them here with every header it would have sent, so they neither
-- stall the stream nor vanish; `ledger relay parked list` shows them and
-- `ledger relay parked republish` sends them again once the cause is fixed.
--
-- Later events of the same aggregate are NOT held back: they are published, and the gap
-- is visible to consumers as a missing stream_version in the envelope, and to operators
-- here. Holding them would let one bad row stall an aggregate forever.
CREATE TABLE outbox_parked (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id       uuid        NOT NULL UNIQUE,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    topic          text        NOT NULL,
    payload        bytea       NOT NULL,
    -- The Kafka headers the message carried: id, event_type, commit_lsn, txid, ...
    headers        jsonb       NOT NULL,
    commit_lsn     pg_lsn      NOT NULL,
    error          text        NOT NULL,
    parked_at      timestamptz NOT NULL DEFAULT now(),
    republished_at timestamptz
);
CREATE INDEX outbox_parked_pending ON outbox_parked (id) WHERE republished_at IS NULL;
