-- The digest a monitor checks ($1, or the newest when NULL), the checkpoint and the index
-- leaf it sealed.
SELECT d.seq, d.root, d.stream_count, d.event_count, c.size, c.root, d.index_leaf
FROM digests d
LEFT JOIN checkpoints c ON c.digest_seq = d.seq
WHERE d.seq = coalesce($1, (SELECT max(seq) FROM digests))
