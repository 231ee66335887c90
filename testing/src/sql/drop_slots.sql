-- Drops the database's inactive replication slots (slots pin WAL for the whole cluster, and a
-- database with slots cannot be dropped); returns how many are still active.
SELECT count(*) FILTER (WHERE active)
FROM (
    SELECT active,
           CASE WHEN NOT active THEN pg_drop_replication_slot(slot_name) END
    FROM pg_replication_slots
    WHERE database = $1
) s
