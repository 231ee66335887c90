-- What retention sees: rows and bytes of the outbox, its marks, parked rows.
SELECT (SELECT count(*) FROM outbox),
       pg_total_relation_size('outbox'),
       (SELECT count(*) FROM outbox_retention_marks),
       (SELECT min(lsn)::text FROM outbox_retention_marks),
       (SELECT count(*) FROM outbox_parked)
