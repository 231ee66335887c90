-- A runner will retry: the error is shown until the next checkpoint clears it. A replay
-- that ended meanwhile (cancelled) keeps what it shows.
UPDATE replays SET error = $2 WHERE id = $1 AND status IN ('requested', 'running')
