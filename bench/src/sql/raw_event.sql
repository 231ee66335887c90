-- The raw baseline's event row: what an assign writes, without the ledger's logic.
INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload,
                    recorded_at, effective_at, actor, correlation_id, causation_id, prev_hash,
                    hash)
VALUES ($1, $2, 1, 'AssignmentStarted', 1, $3, $4, $4, 'bench', $1, NULL, NULL, $5)
