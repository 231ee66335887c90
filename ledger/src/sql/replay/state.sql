SELECT status FROM replays WHERE id = $1
