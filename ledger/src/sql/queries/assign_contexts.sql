-- What a batch of assigns needs to know, in one statement: for each item, in order, the
-- jurisdiction's primary contact and when it took effect, and the business's active
-- assignment there. One row per item: a jurisdiction has at most one primary contact and a
-- business at most one active assignment per jurisdiction (both unique indexes).
SELECT c.contact_id, c.created_at, a.assignment_id
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS i(business_id, jurisdiction, item)
LEFT JOIN contacts c ON c.jurisdiction = i.jurisdiction AND c.status = 'primary'
LEFT JOIN assignments a
       ON a.business_id = i.business_id AND a.jurisdiction = i.jurisdiction
      AND a.ended_at IS NULL
ORDER BY i.item
