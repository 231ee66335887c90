SELECT status, aggregate_types, event_types, stream_prefix, recorded_from, recorded_to,
       topic_prefix, target_template, rate, handoff, snapshot::text AS snapshot,
       past_end_position, total_events, topic_events, checkpoint
FROM replays
WHERE id = $1
