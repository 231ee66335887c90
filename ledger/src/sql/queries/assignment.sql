-- One assignment (the columns of AssignmentView::COLUMNS).
SELECT a.assignment_id, a.business_id, a.jurisdiction, a.contact_id, a.started_at, a.ended_at,
       a.end_reason, a.replaces, a.replaced_by, a.recorded_at, a.ended_recorded_at
FROM assignments a
WHERE a.assignment_id = $1
