-- The run whose page request is raised again, locked against a page committing meanwhile,
-- with how long it has gone without progress.
SELECT status, cursor, pages, old_contact_id, new_contact_id, jurisdiction, page_size,
       requested_by, correlation_id, last_request_id,
       extract(epoch FROM clock_timestamp() - updated_at)::float8, traceparent
FROM reassignment_runs
WHERE run_id = $1
FOR UPDATE
