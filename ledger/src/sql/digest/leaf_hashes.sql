-- Every leaf's hash, in the tree's order: stream names by their bytes (a proof's paths).
SELECT stream, leaf_hash FROM digest_leaves ORDER BY stream COLLATE "C"
