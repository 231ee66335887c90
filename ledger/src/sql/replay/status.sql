SELECT status, aggregate_types, event_types, stream_prefix, recorded_from, recorded_to,
       topic_prefix, target_template, rate, requested_by, requested_at, handoff,
       snapshot::text AS snapshot, past_end_position, total_events, started_at, checkpoint,
       published, attempts, progress_at, completed_at, cancelled_by, cancelled_at, error
FROM replays
WHERE id = $1
