-- Runs in progress without progress (a page, a failed attempt, a re-raise) for $1 seconds.
SELECT run_id
FROM reassignment_runs
WHERE status = 'running' AND updated_at < clock_timestamp() - make_interval(secs => $1)
ORDER BY updated_at
