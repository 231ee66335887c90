-- A failed whole-page attempt, counted on the run if the request is still the current one.
UPDATE reassignment_runs
SET page_attempts = page_attempts + 1, last_error = $4, updated_at = clock_timestamp()
WHERE run_id = $1 AND status = 'running' AND cursor IS NOT DISTINCT FROM $2 AND pages = $3
RETURNING page_attempts
