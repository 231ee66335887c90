-- The relay's slot: connected or not, bytes of WAL it has not confirmed, and the time of the
-- newest retention mark it confirmed (everything committed before it is published).
SELECT s.active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint,
       (SELECT max(m.taken_at) FROM outbox_retention_marks m
        WHERE m.lsn <= s.confirmed_flush_lsn)
FROM pg_replication_slots s
WHERE s.slot_name = $1
