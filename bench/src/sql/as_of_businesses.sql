-- $1 businesses spread over every jurisdiction.
INSERT INTO bench_business (business_id, jurisdiction)
SELECT gen_random_uuid(),
       (SELECT array_agg(code ORDER BY code) FROM jurisdictions)[1 + (n % 56)]
FROM generate_series(1, $1::bigint) n
