-- The index leaf that ends the checkpoint of size $1, if a digest's checkpoint has that
-- size and sealed one (a proof's consistency entries carry it: ledger/src/digest/prove.rs).
SELECT d.index_leaf
FROM checkpoints c JOIN digests d ON d.seq = c.digest_seq
WHERE c.size = $1 AND d.index_leaf IS NOT NULL
ORDER BY d.seq LIMIT 1
