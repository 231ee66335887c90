-- The relay's slot ($1) and how far behind it is: whether a relay streams from it, the WAL
-- bytes it has not confirmed, the WAL it keeps the server from recycling (from its
-- restart_lsn), the time of the newest retention mark it confirmed, and the insert time
-- (`created_at`, the inserting transaction's start) of the first outbox row, by id, that
-- this mark does not cover.
--
-- Why that row bounds the wait of every commit not yet published: a row the mark covers
-- (id <= max_id, of a transaction older than oldest_xact) committed before the mark's
-- position, which the slot confirmed, so it is published. Every unpublished row is among the
-- rows not covered. Ids come from the identity in the order rows are inserted (cache 1), so
-- the first uncovered row was inserted, and its transaction had started, before any other
-- uncovered row was inserted, let alone committed. And whatever committed after the slot's
-- confirmed position committed after the mark was taken. So the oldest unpublished commit
-- came after both times, and when no row is uncovered, nothing committed waits: on an idle
-- ledger the answer is 0, however old the newest mark is.
--
-- The walk by id skips only covered rows retention has not removed yet (one round's worth).
WITH slot AS (
    SELECT active, confirmed_flush_lsn, restart_lsn
    FROM pg_replication_slots
    WHERE slot_name = $1
), mark AS (
    SELECT m.taken_at, m.max_id, m.oldest_xact
    FROM outbox_retention_marks m, slot s
    WHERE m.lsn <= s.confirmed_flush_lsn
    ORDER BY m.lsn DESC
    LIMIT 1
)
SELECT s.active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint,
       (SELECT taken_at FROM mark),
       (SELECT o.created_at
        FROM outbox o
        WHERE NOT EXISTS (SELECT 1 FROM mark m
                          WHERE o.id <= m.max_id AND o.txid < m.oldest_xact)
        ORDER BY o.id
        LIMIT 1)
FROM slot s
