UPDATE replays
SET checkpoint = $2, published = published + $3, progress_at = now(), error = NULL
WHERE id = $1 AND status = 'running' AND checkpoint <= $2
