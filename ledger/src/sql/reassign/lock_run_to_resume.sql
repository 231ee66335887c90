-- The run a `runs resume` re-raises a page for, locked against a page committing meanwhile.
SELECT status, cursor, pages, old_contact_id, new_contact_id, jurisdiction, page_size,
       requested_by, correlation_id, last_request_id
FROM reassignment_runs
WHERE run_id = $1
FOR UPDATE
