-- The events of several streams ($1), each in version order: what each change of a
-- business's timelines rests on.
SELECT stream, event_id, event_type, stream_version, effective_at, recorded_at
FROM events
WHERE stream = ANY($1)
ORDER BY stream, stream_version
