-- A writer asks, from the console, for a parked message to be published again; the relay
-- (which holds the Kafka producer) does it and marks the row republished, or records why
-- Kafka still refused it and clears the request.
ALTER TABLE outbox_parked
    ADD COLUMN republish_requested_at timestamptz,
    ADD COLUMN republish_requested_by text,
    ADD COLUMN republish_error        text;
CREATE INDEX outbox_parked_republish_requested ON outbox_parked (id)
    WHERE republish_requested_at IS NOT NULL AND republished_at IS NULL;
