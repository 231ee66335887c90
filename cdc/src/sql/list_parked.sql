-- Parked messages, oldest first; only those not re-published unless $1.
SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, topic,
       length(payload)::bigint, headers, commit_lsn::text, error, parked_at, republished_at
FROM outbox_parked
WHERE $1 OR republished_at IS NULL
ORDER BY id
