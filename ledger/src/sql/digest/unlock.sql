-- Releases the session advisory lock $1 that try_lock.sql took.
SELECT pg_advisory_unlock($1)
