-- The newest event of each given stream: one index probe per stream, whatever the plan.
SELECT s.stream, h.stream_version, h.hash, h.effective_at
FROM unnest($1::text[]) AS s(stream)
CROSS JOIN LATERAL (
    SELECT e.stream_version, e.hash, e.effective_at
    FROM events e
    WHERE e.stream = s.stream
    ORDER BY e.stream_version DESC
    LIMIT 1
) AS h
