-- One new event in each of $1 random streams, chained to the head a digest sealed.
INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload,
                    recorded_at, effective_at, actor, correlation_id, prev_hash, hash)
SELECT gen_random_uuid(), stream, version + 1, 'AssignmentEnded', 1, '\x00', now(), now(),
       'bench', gen_random_uuid(), hash, sha256(hash || gen_random_uuid()::text::bytea)
FROM (SELECT stream, version, hash FROM digest_leaves ORDER BY random() LIMIT $1::bigint) AS picked
