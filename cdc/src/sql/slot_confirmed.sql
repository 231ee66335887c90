-- Whether PostgreSQL has recorded the slot's confirmed position at or past $2.
SELECT coalesce(confirmed_flush_lsn >= $2::text::pg_lsn, false)
FROM pg_replication_slots
WHERE slot_name = $1
