-- One round trip for a whole batch of events and their outbox rows.
WITH batch AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::bytea[],
                $7::timestamptz[], $8::text[], $9::uuid[], $10::uuid[], $11::bytea[],
                $12::bytea[], $13::text[], $14::text[], $16::text[])
        AS b(event_id, stream, stream_version, event_type, schema_version, payload,
             effective_at, actor, correlation_id, causation_id, prev_hash, hash,
             aggregate_type, aggregate_id, traceparent)
), stored AS (
    INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload,
                        recorded_at, effective_at, actor, correlation_id, causation_id,
                        prev_hash, hash, traceparent)
    SELECT event_id, stream, stream_version, event_type, schema_version, payload,
           $15, effective_at, actor, correlation_id, causation_id, prev_hash, hash, traceparent
    FROM batch
)
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, traceparent)
SELECT event_id, aggregate_type, aggregate_id, event_type, payload, traceparent
FROM batch
