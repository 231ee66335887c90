-- The stream and version of event $1.
SELECT stream, stream_version FROM events WHERE event_id = $1
