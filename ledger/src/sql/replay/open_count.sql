-- Replays that hold a place: waiting for a runner or running.
SELECT count(*) FROM replays WHERE status IN ('requested', 'running')
