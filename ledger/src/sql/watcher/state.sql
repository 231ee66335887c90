-- The watcher's progress; no row before its first round.
SELECT watermark, rescans FROM watcher_progress
