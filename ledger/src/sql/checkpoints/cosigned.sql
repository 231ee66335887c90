-- The checkpoint digest $1 sealed (NULL: the newest) with every cosignature stored for it,
-- ordered by witness (ledger/src/digest/checkpoint.rs `cosigned`). No row: no such checkpoint.
SELECT c.digest_seq, c.note,
       coalesce(array_agg(s.line ORDER BY s.witness) FILTER (WHERE s.line IS NOT NULL), '{}')
FROM (SELECT * FROM checkpoints WHERE $1::bigint IS NULL OR digest_seq = $1
      ORDER BY digest_seq DESC LIMIT 1) c
LEFT JOIN cosignatures s ON s.digest_seq = c.digest_seq
GROUP BY c.digest_seq, c.note
