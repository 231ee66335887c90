SELECT pg_advisory_unlock(hashtextextended('ra_ledger.replay:' || $1::uuid::text, 0))
