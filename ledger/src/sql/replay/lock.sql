-- One runner per replay: a session lock, released with the connection if the runner dies.
SELECT pg_try_advisory_lock(hashtextextended('ra_ledger.replay:' || $1::uuid::text, 0))
