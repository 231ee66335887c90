-- The newest event of each given stream (NULLs for a stream with no event yet): one index
-- probe per stream, whatever the plan. Each row also carries clock_timestamp(), read after
-- this statement's snapshot was taken: every event the snapshot shows committed before that
-- instant, so using it as the transaction's `recorded_at` keeps `recorded_at` increasing
-- along every stream, however long the transaction waited for its locks before.
SELECT s.stream, h.stream_version, h.hash, h.effective_at, clock_timestamp()
FROM unnest($1::text[]) AS s(stream)
LEFT JOIN LATERAL (
    SELECT e.stream_version, e.hash, e.effective_at
    FROM events e
    WHERE e.stream = s.stream
    ORDER BY e.stream_version DESC
    LIMIT 1
) AS h ON true
