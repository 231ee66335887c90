-- The events of stream $1 from version $2 to the sealed head $3, as a proof carries them
-- (ledger/src/digest/prove.rs `event_record` reads the columns in this order).
SELECT event_id, stream, stream_version, event_type, schema_version, payload, recorded_at,
       effective_at, actor, correlation_id, causation_id, prev_hash, hash
FROM events
WHERE stream = $1 AND stream_version BETWEEN $2 AND $3
ORDER BY stream_version
