-- The wait event of the walsender holding slot $1, if one holds it.
SELECT a.wait_event
FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid
WHERE s.slot_name = $1
