UPDATE replays SET attempts = attempts + 1 WHERE id = $1 RETURNING attempts
