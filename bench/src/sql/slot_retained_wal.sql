-- Bytes of WAL the server keeps for slot $1: from its restart_lsn to the current position.
SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::float8
FROM pg_replication_slots
WHERE slot_name = $1
