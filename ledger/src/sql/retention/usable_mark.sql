-- The newest mark the slot has confirmed ($1: the slot's confirmed position).
SELECT lsn::text, oldest_xact::text, max_id
FROM outbox_retention_marks
WHERE lsn <= $1::text::pg_lsn
ORDER BY lsn DESC
LIMIT 1
