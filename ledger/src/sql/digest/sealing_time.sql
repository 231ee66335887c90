-- The database's clock, and whether there is anything to seal: a marked stream, no digest
-- yet, or a newest digest sealed before V25 without an index leaf (ledger/src/digest/build.rs
-- `sealing_time`).
SELECT clock_timestamp(),
       EXISTS (SELECT 1 FROM digest_dirty) OR NOT EXISTS (SELECT 1 FROM digests)
       OR (SELECT index_leaf IS NULL FROM digests ORDER BY seq DESC LIMIT 1)
