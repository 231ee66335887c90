-- At the end of a pass: active assignments still on the old contact that the page does not
-- hold and the run did not give up on. A run completes only when there are none. LIMIT NULL
-- means all of them.
SELECT a.assignment_id, a.business_id
FROM assignments a
WHERE a.contact_id = $1 AND a.ended_at IS NULL AND NOT (a.assignment_id = ANY($2))
  AND NOT EXISTS (SELECT 1 FROM reassignment_failures f
                  WHERE f.run_id = $3 AND f.assignment_id = a.assignment_id)
ORDER BY a.assignment_id
LIMIT $4
