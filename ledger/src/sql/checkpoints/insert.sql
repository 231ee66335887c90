-- The checkpoint a digest sealed, in the building transaction (ledger/src/digest/build.rs):
-- $1 the digest's seq, $2 the log's size, $3 its root, $4 the signed note.
INSERT INTO checkpoints (digest_seq, size, root, note) VALUES ($1, $2, $3, $4)
