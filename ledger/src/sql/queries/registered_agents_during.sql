-- Every RA of business $1 in jurisdiction $2 in force at some instant of [$3, $4): started
-- before $4, ended after $3 (or active), and not ended at the instant it started.
-- The contact's columns carry ContactView::JOINED_PREFIX (c_): both views have a recorded_at.
SELECT a.assignment_id, a.business_id, a.jurisdiction, a.contact_id, a.started_at, a.ended_at,
       a.end_reason, a.replaces, a.replaced_by, a.recorded_at, a.ended_recorded_at,
       c.contact_id AS c_contact_id, c.jurisdiction AS c_jurisdiction, c.name AS c_name,
       c.address_line1 AS c_address_line1, c.address_line2 AS c_address_line2,
       c.city AS c_city, c.region AS c_region, c.postal_code AS c_postal_code,
       c.status AS c_status, c.supersedes AS c_supersedes, c.superseded_by AS c_superseded_by,
       c.created_at AS c_created_at, c.recorded_at AS c_recorded_at,
       c.superseded_at AS c_superseded_at, c.superseded_recorded_at AS c_superseded_recorded_at,
       c.stream_version AS c_stream_version
FROM assignments a
JOIN contacts c ON c.contact_id = a.contact_id
WHERE a.business_id = $1 AND a.jurisdiction = $2
  AND a.started_at < $4 AND (a.ended_at IS NULL OR a.ended_at > $3)
  AND (a.ended_at IS NULL OR a.ended_at > a.started_at)
ORDER BY a.started_at, a.assignment_id
