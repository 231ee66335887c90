-- Marks behind $1, once the rows under it are removed: newer marks cover the rest. The mark
-- at $1 itself, the newest the relay's record passed, is kept: the lag the console reads
-- (sql/lag/slot_progress.sql) takes the rows it covers for published, and its time bounds
-- the wait of the rows it does not. The next round removes nothing more under it and
-- forgets it once the record passed a newer one.
DELETE FROM outbox_retention_marks WHERE lsn < $1::text::pg_lsn
