-- One primary contact per jurisdiction, and a table for the businesses to seed.
INSERT INTO contacts (contact_id, jurisdiction, name, address_line1, city, region, postal_code,
                      status, created_at, recorded_at, stream_version)
SELECT gen_random_uuid(), code, 'Agent ' || code, '1 Main St', 'Capital', code, '00001',
       'primary', '2020-01-01', '2020-01-01', 1
FROM jurisdictions;
CREATE TEMP TABLE bench_business (business_id uuid NOT NULL, jurisdiction text NOT NULL);
