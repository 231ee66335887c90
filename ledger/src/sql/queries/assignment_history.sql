-- One keyset page of business $1's assignments, every jurisdiction, oldest first, after
-- (started_at, assignment_id) = ($2, $3) when given.
SELECT a.assignment_id, a.business_id, a.jurisdiction, a.contact_id, a.started_at, a.ended_at,
       a.end_reason, a.replaces, a.replaced_by, a.recorded_at, a.ended_recorded_at
FROM assignments a
WHERE a.business_id = $1
  AND ($2::timestamptz IS NULL OR (a.started_at, a.assignment_id) > ($2, $3))
ORDER BY a.started_at, a.assignment_id
LIMIT $4
