-- $1 outbox rows of event type $2 over 1,000 aggregates, each with payload $3 (one encoded
-- envelope, so a JSON topic has something real to render).
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'assignment', 'agg-' || (n % 1000), $2, $3
FROM generate_series(1, $1) n
