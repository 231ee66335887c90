-- The newest event of each given stream (NULLs for a stream with no event yet): one index
-- probe per stream, whatever the plan. Each row also carries the transaction's recording
-- time, recording_clock() (migrations/V24), the server's clock read after this statement's
-- snapshot was taken: every event the snapshot shows committed before that instant, so
-- using it as the transaction's `recorded_at` keeps `recorded_at` increasing along every
-- stream, however long the transaction waited for its locks before. The events' trigger
-- writes the same reading into every event this transaction inserts (the database, not the
-- writer, sets `recorded_at`), so the hashes the writer computes with it hold.
--
-- recording_clock() gives the transaction its id (pg_current_xact_id()) before it reads the
-- clock, and `writer` runs it once, before any row is produced: the CTE is a scan every row
-- is joined from, and a row is projected only after the scans under it ran. (A plain
-- subquery would not do: PostgreSQL drops an output nobody reads, volatile or not.) A digest
-- builder that reads its time and then waits for the transactions older than a fresh id
-- therefore waits for every writer whose `recorded_at` is at or before that time
-- (digest/build.rs).
WITH writer AS MATERIALIZED (SELECT recording_clock() AS now)
SELECT s.stream, h.stream_version, h.hash, h.effective_at, writer.now
FROM writer
CROSS JOIN unnest($1::text[]) AS s(stream)
LEFT JOIN LATERAL (
    SELECT e.stream_version, e.hash, e.effective_at
    FROM events e
    WHERE e.stream = s.stream
    ORDER BY e.stream_version DESC
    LIMIT 1
) AS h ON true
