-- A message Kafka refused for good, with every header it would have carried; parked once.
INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, event_type, topic, payload,
                           headers, commit_lsn, error)
VALUES ($1::text::uuid, $2, $3, $4, $5, $6, $7, $8::text::pg_lsn, $9)
ON CONFLICT (event_id) DO NOTHING
