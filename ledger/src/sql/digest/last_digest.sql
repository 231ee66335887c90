-- The newest digest, that the next one chains to and whose tree a builder's cache may hold,
-- and whether it sealed an index leaf (one sealed before V25 did not: the next build seals
-- one even when nothing changed).
SELECT seq, hash, root, event_count, index_leaf IS NOT NULL FROM digests ORDER BY seq DESC LIMIT 1
