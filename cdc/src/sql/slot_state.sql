-- The slot $1 as pg_replication_slots has it, every column as JSON: the columns differ
-- between versions (failover, synced and invalidation_reason came in 17).
SELECT to_jsonb(s)::text FROM pg_replication_slots s WHERE slot_name = $1
