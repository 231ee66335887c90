-- The supersede lineage of contact $1: its ancestors, itself and its successors, oldest first.
WITH RECURSIVE back AS (
    SELECT contact_id, supersedes, 0 AS depth FROM contacts WHERE contact_id = $1
    UNION ALL
    SELECT c.contact_id, c.supersedes, back.depth - 1
    FROM contacts c JOIN back ON c.contact_id = back.supersedes
), forward AS (
    SELECT contact_id, superseded_by, 0 AS depth FROM contacts WHERE contact_id = $1
    UNION ALL
    SELECT c.contact_id, c.superseded_by, forward.depth + 1
    FROM contacts c JOIN forward ON c.contact_id = forward.superseded_by
), chain AS (
    SELECT contact_id, depth FROM back UNION SELECT contact_id, depth FROM forward
)
SELECT c.contact_id, c.jurisdiction, c.name, c.address_line1, c.address_line2, c.city, c.region,
       c.postal_code, c.status, c.supersedes, c.superseded_by, c.created_at, c.recorded_at,
       c.superseded_at, c.superseded_recorded_at, c.stream_version
FROM chain JOIN contacts c USING (contact_id)
ORDER BY chain.depth
