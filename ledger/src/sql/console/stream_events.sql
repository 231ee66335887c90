-- The events of one stream, in version order: what each change of the timeline rests on.
SELECT event_id, event_type, stream_version, effective_at, recorded_at
FROM events
WHERE stream = $1
ORDER BY stream_version
