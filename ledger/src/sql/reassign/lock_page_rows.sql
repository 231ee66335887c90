-- The page's candidates, locked in id order and re-checked: a row that a concurrent run or a
-- cancellation finished meanwhile is waited for, then no longer matches and is skipped.
SELECT a.assignment_id, a.business_id, a.jurisdiction, a.contact_id, a.started_at,
       a.ended_at, a.end_reason, a.replaces, a.replaced_by, a.recorded_at,
       a.ended_recorded_at
FROM assignments a
WHERE a.assignment_id = ANY($1) AND a.contact_id = $2 AND a.ended_at IS NULL
ORDER BY a.assignment_id
FOR UPDATE
