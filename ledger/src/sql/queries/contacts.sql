-- Several contacts ($1) in one statement (the columns of ContactView::COLUMNS).
SELECT c.contact_id, c.jurisdiction, c.name, c.address_line1, c.address_line2, c.city, c.region,
       c.postal_code, c.status, c.supersedes, c.superseded_by, c.created_at, c.recorded_at,
       c.superseded_at, c.superseded_recorded_at, c.stream_version
FROM contacts c
WHERE c.contact_id = ANY($1)
