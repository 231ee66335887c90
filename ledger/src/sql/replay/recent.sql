-- The newest replays ($1 at most), newest first.
SELECT id, status, published, total_events, requested_at
FROM replays
ORDER BY requested_at DESC
LIMIT $1
