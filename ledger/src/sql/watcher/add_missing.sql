-- Events found missing: ids $1 at positions $2.
INSERT INTO watcher_missing (event_id, position)
SELECT * FROM unnest($1::uuid[], $2::bigint[])
ON CONFLICT (event_id) DO NOTHING
