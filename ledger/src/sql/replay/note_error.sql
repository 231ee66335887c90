-- A runner will retry: the error is shown until the next checkpoint clears it.
UPDATE replays SET error = $2 WHERE id = $1
