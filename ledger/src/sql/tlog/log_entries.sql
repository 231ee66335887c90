-- log_leaves.sql with each leaf's stream and version: the log's events sealed by digests
-- up to $1, in log order, for the monitor (ledger/src/digest/monitor.rs).
WITH batches AS (
    SELECT stream, digest_seq, version,
           coalesce(lag(version) OVER (PARTITION BY stream ORDER BY digest_seq), 0) AS before
    FROM digest_leaf_changes
    WHERE digest_seq <= $1
)
SELECT e.stream, e.stream_version, e.hash
FROM batches b
JOIN events e ON e.stream = b.stream
             AND e.stream_version > b.before AND e.stream_version <= b.version
ORDER BY b.digest_seq, b.stream COLLATE "C", e.stream_version
