UPDATE replays
SET status = 'running', handoff = $2, snapshot = $3::text::pg_snapshot,
    past_end_position = $4, total_events = $5, topic_events = $6, started_at = now(),
    progress_at = now(), error = NULL
WHERE id = $1 AND status = 'requested'
