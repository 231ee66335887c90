-- The page: the next active assignments of the old contact from the first id after the
-- cursor on, in id order, read without locks and without OFFSET ($2 is the cursor's
-- successor, or the nil UUID at the start of a pass: one index range either way). Rows this
-- run already gave up on are left out, so a later pass does not try them again.
SELECT a.assignment_id
FROM assignments a
WHERE a.contact_id = $1 AND a.ended_at IS NULL AND a.assignment_id >= $2
  AND NOT EXISTS (SELECT 1 FROM reassignment_failures f
                  WHERE f.run_id = $4 AND f.assignment_id = a.assignment_id)
ORDER BY a.assignment_id
LIMIT $3
