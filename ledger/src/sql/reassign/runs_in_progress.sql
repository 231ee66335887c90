-- The runs in progress: how many, and the longest any of them has gone without a page (since
-- its newest page finished, or since it started; 0 when none runs). A re-raised page request
-- moves `updated_at` but runs no page, so this reads the pages, not `updated_at`.
SELECT count(*),
       coalesce(max(extract(epoch FROM clock_timestamp() - coalesce(
           (SELECT max(p.finished_at) FROM reassignment_pages p WHERE p.run_id = r.run_id),
           r.started_at))), 0)::float8
FROM reassignment_runs r
WHERE r.status = 'running'
