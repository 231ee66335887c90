-- Every event, stream by stream in version order: the hash chains to recompute.
SELECT event_id, stream, stream_version, event_type, schema_version, payload, recorded_at,
       effective_at, actor, correlation_id, causation_id, prev_hash, hash
FROM events
ORDER BY stream, stream_version
