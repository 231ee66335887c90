-- The index leaf digest $1 sealed: NULL for one sealed before V25, none for no digest.
SELECT index_leaf FROM digests WHERE seq = $1
