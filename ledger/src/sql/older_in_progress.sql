-- Transactions with an id below $1 that still count as in progress (their commit may
-- already be in the WAL, and on Kafka), with the sessions that run them.
SELECT x::text AS xid,
       (SELECT string_agg(pid::text, ',') FROM pg_stat_activity
         WHERE backend_xid::text = (x::text::bigint % 4294967296)::text) AS pids
FROM pg_snapshot_xip(pg_current_snapshot()) AS x
WHERE x < $1::text::xid8
