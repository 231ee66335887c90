-- Contacts by jurisdiction ($1, NULL: any) and a name fragment ($2, a LIKE pattern with
-- its wildcards escaped), primary first, at most 100 (queries::SEARCH_LIMIT).
SELECT contact_id, jurisdiction, name, address_line1, address_line2, city, region,
       postal_code, status, supersedes, superseded_by, created_at, recorded_at, superseded_at,
       superseded_recorded_at, stream_version
FROM contacts
WHERE ($1::text IS NULL OR jurisdiction = $1) AND name ILIKE $2
ORDER BY jurisdiction, status DESC, name, contact_id
LIMIT 100
