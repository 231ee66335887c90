-- The raw baseline's outbox row.
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
VALUES ($1, 'assignment', $2, 'AssignmentStarted', $3)
