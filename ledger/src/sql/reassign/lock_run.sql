-- The run a page belongs to, locked for the page's transaction: the fence (cursor and page
-- number) is checked and advanced under this lock.
SELECT status, cursor, pages, pass, replaced, skipped, failed, page_attempts, jurisdiction,
       requested_by, correlation_id, traceparent
FROM reassignment_runs
WHERE run_id = $1
FOR UPDATE
