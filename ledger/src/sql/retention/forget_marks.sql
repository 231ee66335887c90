-- Marks at or behind $1, once the rows under it are removed: newer marks cover the rest.
DELETE FROM outbox_retention_marks WHERE lsn <= $1::text::pg_lsn
