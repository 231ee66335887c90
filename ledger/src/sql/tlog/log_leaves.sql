-- The log's leaves sealed by digests ($1, $2]: for each digest in order, the streams whose
-- head it moved, by name bytes, and in each the events after the version sealed before,
-- by version; then the digest's index leaf (80 bytes; none for digests sealed before V25).
-- A leaf's input is the event's hash or the index leaf's bytes (ledger/src/tlog/mod.rs,
-- ledger/src/digest/index.rs).
WITH batches AS (
    SELECT stream, digest_seq, version,
           coalesce(lag(version) OVER (PARTITION BY stream ORDER BY digest_seq), 0) AS before
    FROM digest_leaf_changes
    WHERE digest_seq <= $2
), leaves AS (
    SELECT b.digest_seq, 0 AS part, b.stream, e.stream_version, e.hash AS leaf
    FROM batches b
    JOIN events e ON e.stream = b.stream
                 AND e.stream_version > b.before AND e.stream_version <= b.version
    WHERE b.digest_seq > $1
    UNION ALL
    SELECT seq, 1, '', 0, index_leaf
    FROM digests
    WHERE seq > $1 AND seq <= $2 AND index_leaf IS NOT NULL
)
SELECT leaf FROM leaves
ORDER BY digest_seq, part, stream COLLATE "C", stream_version
