-- stream_heads.sql for one stream: its newest event (NULLs when it has none) and the clock.
-- PostgreSQL plans the array form again on every call (the array's length changes its
-- estimates), about 75 µs a command; this one it plans once and caches. `writer` reads the
-- transaction's recording time once, its id given out first, as stream_heads.sql explains.
WITH writer AS MATERIALIZED (SELECT recording_clock() AS now)
SELECT $1::text, h.stream_version, h.hash, h.effective_at, writer.now
FROM writer
LEFT JOIN LATERAL (
    SELECT e.stream_version, e.hash, e.effective_at
    FROM events e
    WHERE e.stream = $1
    ORDER BY e.stream_version DESC
    LIMIT 1
) AS h ON true
