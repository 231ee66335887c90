UPDATE replays SET status = 'complete', completed_at = now(), error = NULL
WHERE id = $1 AND status = 'running'
