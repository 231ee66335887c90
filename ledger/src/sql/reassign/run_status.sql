-- A run's progress, with the active assignments still on its old contact counted now.
SELECT r.run_id, r.status, r.old_contact_id, r.new_contact_id, r.jurisdiction,
       r.page_size, r.cursor, r.pages, r.replaced, r.skipped, r.failed,
       r.total_at_start,
       (SELECT count(*) FROM assignments a
         WHERE a.contact_id = r.old_contact_id AND a.ended_at IS NULL),
       r.page_attempts, r.last_error, r.requested_by, r.correlation_id,
       r.started_at, r.updated_at, r.completed_at,
       extract(epoch FROM coalesce(r.completed_at, clock_timestamp()) - r.started_at)::float8,
       r.longest_page_ms, r.pass, r.stalls,
       extract(epoch FROM clock_timestamp() - r.updated_at)::float8
FROM reassignment_runs r
WHERE r.run_id = $1
