-- $1 assignment streams of one event each, named like the ledger's, with a random head hash
-- (a digest reads heads, not payloads). The insert trigger marks each for the next digest.
INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload,
                    recorded_at, effective_at, actor, correlation_id, prev_hash, hash)
SELECT gen_random_uuid(), 'assignment-' || gen_random_uuid() || '-TX', 1, 'AssignmentStarted',
       1, '\x00', now(), now(), 'bench', gen_random_uuid(), NULL,
       sha256(gen_random_uuid()::text::bytea)
FROM generate_series(1, $1::bigint)
