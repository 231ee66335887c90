-- The round's progress: watermark $1, lag bound $2 seconds, rescans $3 and why the last
-- ($4, kept when NULL).
INSERT INTO watcher_progress (watermark, round_at, lag_bound_s, rescans, last_rescan)
VALUES ($1, now(), $2, $3, $4)
ON CONFLICT (singleton) DO UPDATE
SET watermark = EXCLUDED.watermark,
    round_at = EXCLUDED.round_at,
    lag_bound_s = EXCLUDED.lag_bound_s,
    rescans = EXCLUDED.rescans,
    last_rescan = coalesce(EXCLUDED.last_rescan, watcher_progress.last_rescan)
