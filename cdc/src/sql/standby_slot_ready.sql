-- On a standby: whether slot $1 is synchronized and would survive a promotion (a synced
-- slot stays temporary until its consumer advanced it past the standby's horizon, and
-- PostgreSQL drops slots that are not ready when it promotes). false when it is missing.
SELECT coalesce((SELECT synced AND NOT temporary AND invalidation_reason IS NULL
                 FROM pg_replication_slots WHERE slot_name = $1), false)
