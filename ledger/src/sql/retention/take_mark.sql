-- A new mark, unless no outbox row arrived since the newest mark the relay's record has not
-- passed yet ($1: the mark this round removed up to, kept for the console, or NULL). A kept mark
-- does not count: its rows are removed, and rows it could not cover (of transactions older
-- than its oldest_xact) need a newer mark even when nothing new arrives. The statement's
-- snapshot is taken before it runs, so every transaction older than its xmin had finished,
-- with its rows visible to max(id), before the WAL insert position is read.
INSERT INTO outbox_retention_marks (oldest_xact, max_id, lsn)
SELECT pg_snapshot_xmin(pg_current_snapshot()), newest.id, pg_current_wal_insert_lsn()
FROM (SELECT coalesce(max(id), 0) AS id FROM outbox) newest
WHERE newest.id > coalesce((SELECT max(max_id) FROM outbox_retention_marks
                            WHERE $1::text IS NULL OR lsn > $1::text::pg_lsn), 0)
ON CONFLICT (lsn) DO NOTHING
