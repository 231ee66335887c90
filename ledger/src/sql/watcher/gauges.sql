-- What every replica shows of the watcher, whichever runs it: the events missing, the
-- watermark, when the last round ended (Unix seconds), the rescans and why the last. NULLs
-- before the first round.
SELECT (SELECT count(*) FROM watcher_missing) AS missing,
       p.watermark,
       extract(epoch FROM p.round_at)::float8 AS round_at,
       p.rescans,
       p.last_rescan
FROM (SELECT 1) AS one
LEFT JOIN watcher_progress p ON true
