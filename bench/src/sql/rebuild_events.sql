-- Seeded events for the rebuild bench: $1 ids, $2 streams, $3 payloads, recorded at $4.
-- The rebuild reads payloads only; the hash is a placeholder.
INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload,
                    recorded_at, effective_at, actor, correlation_id, hash)
SELECT id, stream, 1, 'AssignmentStarted', 1, payload, $4, $4, 'bench', id, '\x00'
FROM unnest($1::uuid[], $2::text[], $3::bytea[]) AS seeded(id, stream, payload)
