-- The database's clock, and whether there is anything to seal: a marked stream, or no
-- digest yet (ledger/src/digest/build.rs `sealing_time`).
SELECT clock_timestamp(),
       EXISTS (SELECT 1 FROM digest_dirty) OR NOT EXISTS (SELECT 1 FROM digests)
