-- Event ids parked above the exactly-once relay's position ($1, an LSN as text): their
-- transactions are not in Kafka yet, and a resend leaves them out.
SELECT event_id::text FROM outbox_parked WHERE commit_lsn > $1::text::pg_lsn
