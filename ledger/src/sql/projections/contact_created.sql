-- ContactCreated: the contact's row.
INSERT INTO contacts (contact_id, jurisdiction, name, address_line1, address_line2, city, region,
                      postal_code, status, supersedes, created_at, recorded_at, stream_version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
