-- AssignmentStarted: the assignment's row, active.
INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at,
                         replaces, recorded_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
