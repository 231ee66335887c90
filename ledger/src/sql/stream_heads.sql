-- The newest event of each given stream.
SELECT DISTINCT ON (stream) stream, stream_version, hash, effective_at
FROM events
WHERE stream = ANY($1)
ORDER BY stream, stream_version DESC
