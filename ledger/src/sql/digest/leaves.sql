-- Every leaf of the digests' tree, in its order: stream names by their bytes.
SELECT stream, version, leaf_hash FROM digest_leaves ORDER BY stream COLLATE "C"
