-- The standby gate on this server: synchronized_standby_slots (NULL before PostgreSQL 17),
-- and every physical slot, with whether it is temporary (a base backup's without -C, which
-- can be no standby's primary_slot_name).
SELECT current_setting('synchronized_standby_slots', true) AS setting,
       coalesce(array_agg(slot_name::text ORDER BY slot_name), '{}') AS physical,
       coalesce(array_agg(temporary ORDER BY slot_name), '{}') AS temporary
FROM pg_replication_slots
WHERE slot_type = 'physical'
