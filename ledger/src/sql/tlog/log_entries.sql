-- The transparency log up to digest $1, in log order, each leaf with its stream and version
-- (ledger/src/digest/log.rs `read_indexed`, the one reading of the whole log): for each
-- digest in order, the streams whose head it moved, by name bytes, and in each the events
-- after the version sealed before, by version; then the digest's index leaf, which has no
-- stream (NULL) and its 80 bytes as the leaf (none for digests sealed before V25).
WITH batches AS (
    SELECT stream, digest_seq, version,
           coalesce(lag(version) OVER (PARTITION BY stream ORDER BY digest_seq), 0) AS before
    FROM digest_leaf_changes
    WHERE digest_seq <= $1
), leaves AS (
    SELECT b.digest_seq, 0 AS part, b.stream, e.stream_version, e.hash AS leaf
    FROM batches b
    JOIN events e ON e.stream = b.stream
                 AND e.stream_version > b.before AND e.stream_version <= b.version
    UNION ALL
    SELECT seq, 1, NULL, NULL, index_leaf
    FROM digests
    WHERE seq <= $1 AND index_leaf IS NOT NULL
)
SELECT stream, stream_version, leaf FROM leaves
ORDER BY digest_seq, part, stream COLLATE "C", stream_version
