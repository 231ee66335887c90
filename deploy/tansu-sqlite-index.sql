-- An index that tansu 0.6.0's SQLite schema lacks. Its fetch reads each record's headers
-- with one query that looks them up by (topition, offset_id), and its header table has no
-- index on them, so every fetched record scans every header of the broker: a consumer
-- reading n records with headers does O(n²) work. Measured with 15,000 records of six
-- headers each: nothing delivered in 120 s (heartbeats timed out behind the fetch); with
-- this index, all 15,000 in 2 s. Record deletes (retention) cascade to headers through the
-- same columns. tansu's own statements do not depend on its absence.
--
-- Applied by deploy/stack and the test harness once tansu has created its schema.
CREATE INDEX IF NOT EXISTS ra_ledger_header_record ON header (topition, offset_id);
