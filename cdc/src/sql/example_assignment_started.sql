-- AssignmentStarted: the business's current RA.
INSERT INTO example_current_ra VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (business_id, jurisdiction) DO UPDATE
SET assignment_id = $3, contact_id = $4, since = $5
