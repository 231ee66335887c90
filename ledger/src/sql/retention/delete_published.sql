-- One batch of published rows under mark $1, after id $2, at most $3; the count and the
-- highest id removed. Walks the primary key from $2 up to the mark's max_id.
WITH removed AS (
    DELETE FROM outbox
    WHERE id IN (
        SELECT o.id
        FROM outbox o
        JOIN outbox_retention_marks m ON m.lsn = $1::text::pg_lsn
        WHERE o.id > $2 AND o.id <= m.max_id AND o.txid < m.oldest_xact
        ORDER BY o.id
        LIMIT $3)
    RETURNING id)
SELECT count(*), coalesce(max(id), $2) FROM removed
