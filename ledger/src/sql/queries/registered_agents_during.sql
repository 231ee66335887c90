-- Every RA of business $1 in jurisdiction $2 in force at some instant of [$3, $4): started
-- before $4, ended after $3 (or active), and not ended at the instant it started.
SELECT a.assignment_id, a.business_id, a.jurisdiction, a.contact_id, a.started_at, a.ended_at,
       a.end_reason, a.replaces, a.replaced_by, a.recorded_at, a.ended_recorded_at,
       c.contact_id, c.jurisdiction, c.name, c.address_line1, c.address_line2, c.city, c.region,
       c.postal_code, c.status, c.supersedes, c.superseded_by, c.created_at, c.recorded_at,
       c.superseded_at, c.superseded_recorded_at, c.stream_version
FROM assignments a
JOIN contacts c ON c.contact_id = a.contact_id
WHERE a.business_id = $1 AND a.jurisdiction = $2
  AND a.started_at < $4 AND (a.ended_at IS NULL OR a.ended_at > $3)
  AND (a.ended_at IS NULL OR a.ended_at > a.started_at)
ORDER BY a.started_at, a.assignment_id
