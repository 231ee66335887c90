-- Whether the relay's slot $1 is confirmed at or past the WAL position $2 (no row: no slot).
SELECT confirmed_flush_lsn >= $2::text::pg_lsn
FROM pg_replication_slots
WHERE slot_name = $1
