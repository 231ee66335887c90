-- Many AssignmentStarted at once.
INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at,
                         replaces, recorded_at)
SELECT *
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::timestamptz[], $6::uuid[],
            $7::timestamptz[])
