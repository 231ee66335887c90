-- The first statement of the ledger's snapshot: the WAL insert position after it (every
-- event the snapshot sees committed before it), and the transaction's time by the
-- database's clock, from which a window goes back.
SELECT pg_current_wal_insert_lsn()::text, now()
