UPDATE replays SET status = 'failed', error = $2 WHERE id = $1 AND status IN ('requested', 'running')
