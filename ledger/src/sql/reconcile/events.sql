-- The events `ledger reconcile` expects on the live topics: recorded since $1 (all when
-- NULL), of the aggregate types with event topics ($2).
SELECT event_id
FROM events
WHERE ($1::timestamptz IS NULL OR recorded_at >= $1)
  AND split_part(stream, '-', 1) = ANY ($2::text[])
