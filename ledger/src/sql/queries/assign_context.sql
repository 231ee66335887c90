-- What an assign needs to know: the jurisdiction's primary contact and when it took effect,
-- and the business's active assignment there, in one row even when neither exists.
SELECT c.contact_id, c.created_at,
       (SELECT a.assignment_id FROM assignments a
        WHERE a.business_id = $2 AND a.jurisdiction = $1 AND a.ended_at IS NULL)
FROM (SELECT 1) AS one
LEFT JOIN contacts c ON c.jurisdiction = $1 AND c.status = 'primary'
