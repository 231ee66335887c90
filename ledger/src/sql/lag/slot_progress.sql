-- The relay's slot ($1) and how far behind it is: whether a relay streams from it, the WAL
-- bytes it has not confirmed, the WAL it keeps the server from recycling (from its
-- restart_lsn), whether the server still keeps that WAL (wal_status, safe_wal_size) and the
-- limit past which it would not, the time of the newest retention mark the relay's record of
-- what Kafka holds has passed (relay_slots.published_lsn, migration V20: the fact retention
-- deletes on, never the slot's confirmed position, which others can move), and
-- the insert time (`created_at`, the inserting transaction's start) of the first outbox
-- row, by id, that this mark does not cover; and the relay's own report of its lag
-- (relay_lag_reports, migration V18: its oldest unconfirmed commit and how old the report
-- is), which makes the bound exact while it is fresh (ledger/src/lag/exact.rs). Read by
-- column name.
--
-- Why that row bounds the wait of every commit not yet published: a row the mark covers
-- (id <= max_id, of a transaction older than oldest_xact) committed before the mark's
-- position, which the relay recorded Kafka holds, so it is published. Every unpublished row is among the
-- rows not covered. Ids come from the identity in the order rows are inserted (cache 1), so
-- the first uncovered row was inserted, and its transaction had started, before any other
-- uncovered row was inserted, let alone committed. And whatever committed after the slot's
-- confirmed position committed after the mark was taken. So the oldest unpublished commit
-- came after both times, and when no row is uncovered, nothing committed waits: on an idle
-- ledger the answer is 0, however old the newest mark is.
--
-- The walk by id skips only covered rows retention has not removed yet (one round's worth).
--
-- The limit is what safe_wal_size counts from: max_slot_wal_keep_size, or wal_keep_size when
-- larger, in whole WAL segments (PostgreSQL's XLogMBVarToSegs rounds down); NULL when
-- max_slot_wal_keep_size is -1, no limit. Every column read here exists from PostgreSQL 13
-- on, so one query fits every version the ledger supports.
WITH slot AS (
    SELECT active, confirmed_flush_lsn, restart_lsn, wal_status, safe_wal_size
    FROM pg_replication_slots
    WHERE slot_name = $1
), keep AS (
    SELECT pg_size_bytes(current_setting('max_slot_wal_keep_size')) AS slot_bytes,
           pg_size_bytes(current_setting('wal_keep_size')) AS keep_bytes,
           pg_size_bytes(current_setting('wal_segment_size')) AS segment_bytes
), record AS (
    SELECT published_lsn
    FROM relay_slots
    WHERE slot_name = $1
      AND ready
      AND published_system_id = (SELECT system_identifier::text FROM pg_control_system())
), mark AS (
    SELECT m.taken_at, m.max_id, m.oldest_xact
    FROM outbox_retention_marks m, record r
    WHERE m.lsn <= r.published_lsn
    ORDER BY m.lsn DESC
    LIMIT 1
)
SELECT s.active AS streaming,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint AS lag_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint AS retained_bytes,
       s.wal_status,
       s.safe_wal_size AS safe_wal_bytes,
       CASE WHEN k.slot_bytes >= 0
            THEN greatest(k.slot_bytes, k.keep_bytes) / k.segment_bytes * k.segment_bytes
       END AS wal_keep_limit_bytes,
       (SELECT taken_at FROM mark) AS published_before,
       (SELECT o.created_at
        FROM outbox o
        WHERE NOT EXISTS (SELECT 1 FROM mark m
                          WHERE o.id <= m.max_id AND o.txid < m.oldest_xact)
        ORDER BY o.id
        LIMIT 1) AS first_uncovered_row,
       r.oldest_unconfirmed_commit_at AS relay_oldest_unconfirmed,
       r.reported_at IS NOT NULL AS relay_reported,
       (extract(epoch FROM clock_timestamp() - r.reported_at) * 1000)::bigint AS relay_report_age_ms
FROM slot s
CROSS JOIN keep k
LEFT JOIN relay_lag_reports r ON r.slot_name = $1
