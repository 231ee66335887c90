-- The pages a run processed ($1), in the order they ran, the newest $2 at most: rows each
-- handled and when its transaction ran.
SELECT page, pass, replaced + skipped + failed, started_at, finished_at
FROM (SELECT page, pass, replaced, skipped, failed, started_at, finished_at
      FROM reassignment_pages
      WHERE run_id = $1
      ORDER BY finished_at DESC
      LIMIT $2) newest
ORDER BY finished_at
