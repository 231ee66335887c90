-- The transactional outbox.
--
-- Every command writes its ledger events and one outbox row per integration event in the
-- same transaction, so the write and the event commit together or not at all. Rows are
-- never updated: the CDC relay reads the inserts from the WAL through the publication
-- below, in commit order, and publishes them to Kafka.
--
-- `id` is a sequence number for humans and retention jobs. It is NOT commit order: a
-- transaction that took a lower id can commit after one with a higher id. The relay never
-- relies on it.
CREATE TABLE outbox (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Unique id of the event; the Kafka header `id` that consumers deduplicate on.
    event_id       uuid        NOT NULL UNIQUE,
    -- Selects the topic (Debezium EventRouter layout: outbox.event.<aggregate_type>).
    aggregate_type text        NOT NULL CHECK (aggregate_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    -- The Kafka key: all events of one aggregate land in one partition, in order.
    aggregate_id   text        NOT NULL CHECK (aggregate_id <> ''),
    event_type     text        NOT NULL CHECK (event_type <> ''),
    -- The protobuf-encoded event envelope (ra.ledger.v1.Envelope): the Kafka value.
    payload        bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE outbox IS
    'Integration events, written in the same transaction as the change they announce; read by the CDC relay from the WAL.';

-- Insert-only: the relay must never see updates or deletes (a retention job may delete
-- old rows without anything reaching Kafka).
CREATE PUBLICATION ra_ledger_outbox FOR TABLE outbox WITH (publish = 'insert');
