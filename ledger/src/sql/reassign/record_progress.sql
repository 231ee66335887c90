-- A page's record and the run's progress, written last so that `finished_at` and the
-- longest page cover all of the page's work. The run's cursor and page number become the
-- fence the next request must match.
WITH page AS (
    INSERT INTO reassignment_pages (run_id, page, cursor_from, cursor_to, candidates,
                                    replaced, skipped, failed, isolated, started_at,
                                    finished_at, pass)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), clock_timestamp(), $15)
)
UPDATE reassignment_runs
SET cursor = $16, pages = $2, pass = $17, new_contact_id = $18,
    replaced = $11, skipped = $12, failed = $13,
    page_attempts = 0, last_error = NULL, last_request_id = $10,
    status = CASE WHEN $14 THEN 'completed' ELSE status END,
    completed_at = CASE WHEN $14 THEN clock_timestamp() END,
    longest_page_ms = greatest(longest_page_ms,
                               extract(epoch FROM clock_timestamp() - now()) * 1000),
    updated_at = clock_timestamp()
WHERE run_id = $1
