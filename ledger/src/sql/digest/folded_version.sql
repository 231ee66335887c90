-- The newest version of stream $1 recorded by $2 (1 when none: the first event is proven).
SELECT coalesce(max(stream_version), 1) FROM events WHERE stream = $1 AND recorded_at <= $2
