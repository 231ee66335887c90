-- One watcher at a time among the service's replicas: a session lock, held while it runs
-- (released when its connection closes).
SELECT pg_try_advisory_lock(hashtextextended('ra_ledger.watcher', 0))
