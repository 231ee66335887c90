-- A run starts: its row, with the old contact's active assignments counted for progress.
INSERT INTO reassignment_runs (run_id, old_contact_id, new_contact_id, jurisdiction,
                               page_size, status, total_at_start, requested_by,
                               correlation_id, last_request_id, started_at, updated_at,
                               traceparent)
SELECT $1, $2, $3, $4, $5, 'running',
       (SELECT count(*) FROM assignments WHERE contact_id = $2 AND ended_at IS NULL),
       $6, $7, $8, $9, $9, $10
RETURNING total_at_start
