-- The newest replays.
SELECT id, status, published, total_events, requested_at
FROM replays
ORDER BY requested_at DESC
LIMIT 20
