-- Recovery, in the new slot's snapshot: the ledger's events recorded since $1 whose outbox
-- rows retention already removed (the outbox rows follow, from recover_outbox.sql), not
-- parked, of the aggregate types with topics ($2), in the order they were written.
SELECT e.position, e.event_id::text, e.stream, e.event_type, e.payload, e.traceparent,
       e.txid::text::bigint & 4294967295
FROM events e
WHERE e.recorded_at >= $1
  AND split_part(e.stream, '-', 1) = ANY ($2::text[])
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.event_id)
  AND NOT EXISTS (SELECT 1 FROM outbox_parked p WHERE p.event_id = e.event_id)
ORDER BY e.position
