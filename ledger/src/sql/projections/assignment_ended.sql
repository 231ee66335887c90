-- AssignmentEnded: the active assignment ends.
UPDATE assignments
SET ended_at = $2, end_reason = $3, replaced_by = $4, ended_recorded_at = $5
WHERE assignment_id = $1 AND ended_at IS NULL
