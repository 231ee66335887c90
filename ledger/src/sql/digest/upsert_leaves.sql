-- The changed streams' heads become the tree's leaves; a leaf that really moved is also
-- recorded, append-only, under this digest. $1 streams, $2 versions, $3 head hashes,
-- $4 leaf hashes, $5 the digest's seq.
WITH changed AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::bytea[])
        AS c(stream, version, hash, leaf_hash)
), moved AS (
    INSERT INTO digest_leaves (stream, version, hash, leaf_hash, digest_seq)
    SELECT stream, version, hash, leaf_hash, $5 FROM changed
    ON CONFLICT (stream) DO UPDATE
        SET version = EXCLUDED.version, hash = EXCLUDED.hash,
            leaf_hash = EXCLUDED.leaf_hash, digest_seq = EXCLUDED.digest_seq
        WHERE digest_leaves.version <> EXCLUDED.version OR digest_leaves.hash <> EXCLUDED.hash
    RETURNING stream, version, hash
)
INSERT INTO digest_leaf_changes (stream, digest_seq, version, hash)
SELECT stream, $5, version, hash FROM moved
