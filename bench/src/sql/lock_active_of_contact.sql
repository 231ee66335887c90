-- Every active assignment of contact $1, locked in id order: what the one-transaction
-- REPLACE of the benchmark moves.
SELECT a.assignment_id, a.business_id, a.jurisdiction, a.contact_id, a.started_at,
       a.ended_at, a.end_reason, a.replaces, a.replaced_by, a.recorded_at,
       a.ended_recorded_at
FROM assignments a
WHERE a.contact_id = $1 AND a.ended_at IS NULL
ORDER BY a.assignment_id
FOR UPDATE
