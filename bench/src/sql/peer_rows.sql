-- The peer benchmark's rows: sequence numbers $2 to $3 as outbox rows of aggregate type $1
-- (one topic per phase), over 1,000 aggregates (key agg-<n % 1000>), each payload 120
-- bytes that start with the row's sequence number, zero-padded to 20 digits, so a consumer
-- can tell lost, duplicated and reordered rows and check that the payload came through
-- unchanged. Returns the event ids in sequence order.
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), $1, 'agg-' || (n % 1000), 'AssignmentStarted',
       convert_to(lpad(n::text, 20, '0') || repeat('x', 100), 'UTF8')
FROM generate_series($2::bigint, $3::bigint) n
ORDER BY n
RETURNING event_id::text
