-- The event leaves digest $1 appends, in the order of log_entries.sql, with their streams
-- and versions: the streams whose head it moved, by name bytes, and in each the events
-- after the version sealed before (one index probe per stream, not a pass over every
-- digest's changes). The builder appends the digest's index leaf after them.
SELECT e.stream, e.stream_version, e.hash
FROM digest_leaf_changes c
LEFT JOIN LATERAL (
    SELECT p.version FROM digest_leaf_changes p
    WHERE p.stream = c.stream AND p.digest_seq < c.digest_seq
    ORDER BY p.digest_seq DESC LIMIT 1
) p ON true
JOIN events e ON e.stream = c.stream
             AND e.stream_version > coalesce(p.version, 0) AND e.stream_version <= c.version
WHERE c.digest_seq = $1
ORDER BY c.stream COLLATE "C", e.stream_version
