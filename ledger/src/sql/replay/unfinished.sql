-- Replays a runner may take, oldest first.
SELECT id FROM replays WHERE status IN ('requested', 'running') ORDER BY requested_at, id
