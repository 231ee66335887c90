-- Rows a page gave up on, with their reasons.
INSERT INTO reassignment_failures (run_id, assignment_id, business_id, attempts, reason,
                                   failed_at)
SELECT $1, f.assignment_id, f.business_id, $4, f.reason, clock_timestamp()
FROM unnest($2::uuid[], $3::uuid[], $5::text[]) AS f(assignment_id, business_id, reason)
