-- The last position `events` handed out (0 before the first): read before the fence
-- (fence.sql) is taken in the same transaction. A writer takes its transaction id before
-- its first row (sql/stream_heads.sql), so one that holds a position at or below this has
-- an id below the fence: once no transaction below the fence is in progress
-- (sql/older_in_progress.sql), every position at or below this is committed or never
-- will be.
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('events', 'position')::regclass), 0)
