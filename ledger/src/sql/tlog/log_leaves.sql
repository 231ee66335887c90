-- The log's leaves sealed by digests ($1, $2]: for each digest in order, the streams whose
-- head it moved, by name bytes, and in each the events after the version sealed before,
-- by version. Their hashes are the leaves (ledger/src/tlog/mod.rs).
WITH batches AS (
    SELECT stream, digest_seq, version,
           coalesce(lag(version) OVER (PARTITION BY stream ORDER BY digest_seq), 0) AS before
    FROM digest_leaf_changes
    WHERE digest_seq <= $2
)
SELECT e.hash
FROM batches b
JOIN events e ON e.stream = b.stream
             AND e.stream_version > b.before AND e.stream_version <= b.version
WHERE b.digest_seq > $1
ORDER BY b.digest_seq, b.stream COLLATE "C", e.stream_version
