-- $1 outbox rows of event type $2 with 120-byte payloads over 1,000 aggregates.
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'assignment', 'agg-' || (n % 1000), $2,
       convert_to(repeat('x', 120), 'UTF8')
FROM generate_series(1, $1) n
