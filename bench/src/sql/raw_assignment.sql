-- The raw baseline's projection row.
INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at,
                         recorded_at)
VALUES ($1, $2, 'TX', $3, $4, $4)
