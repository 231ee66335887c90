-- log_leaves.sql with each leaf's stream and version: the log up to digest $1, in log
-- order, for the monitor and the proofs (ledger/src/digest/log.rs `read_indexed`). An
-- index leaf has no stream (NULL) and its 80 bytes as the leaf.
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
