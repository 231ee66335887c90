-- Many AssignmentEnded at once: every active assignment named ends.
UPDATE assignments a
SET ended_at = e.ended_at, end_reason = e.reason, replaced_by = e.replaced_by,
    ended_recorded_at = e.recorded_at
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::uuid[], $5::timestamptz[])
     AS e(assignment_id, ended_at, reason, replaced_by, recorded_at)
WHERE a.assignment_id = e.assignment_id AND a.ended_at IS NULL
