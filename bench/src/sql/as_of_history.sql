-- Five assignments per business, one a year, each replaced by the next: the history the
-- as-of question reads, straight into the projection (the query reads only the projection).
INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at,
                         ended_at, end_reason, recorded_at, ended_recorded_at)
SELECT gen_random_uuid(), b.business_id, b.jurisdiction, c.contact_id,
       '2021-01-01'::timestamptz + (k * interval '365 days'),
       CASE WHEN k < 4 THEN '2021-01-01'::timestamptz + ((k + 1) * interval '365 days') END,
       CASE WHEN k < 4 THEN 'replaced' END,
       '2021-01-01'::timestamptz + (k * interval '365 days'),
       CASE WHEN k < 4 THEN '2021-01-01'::timestamptz + ((k + 1) * interval '365 days') END
FROM bench_business b
JOIN contacts c ON c.jurisdiction = b.jurisdiction
CROSS JOIN generate_series(0, 4) k;
ANALYZE assignments;
ANALYZE contacts;
