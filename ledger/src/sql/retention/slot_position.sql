-- The relay's slot and the position it confirmed (NULL until it confirmed anything), by name.
SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1
