-- The leaves digests ($1, $2] sealed, oldest digest first, each with the hash the events
-- table holds now at the sealed version (NULL: no such event). A stream's later row
-- replaces its earlier one.
SELECT c.stream, c.version, c.hash, e.hash
FROM digest_leaf_changes c
LEFT JOIN events e ON e.stream = c.stream AND e.stream_version = c.version
WHERE c.digest_seq > $1 AND c.digest_seq <= $2
ORDER BY c.digest_seq
