-- Most page transactions of one run that were open at the same time, from the pages'
-- recorded transaction intervals.
SELECT coalesce(max(overlapping), 0)
FROM (
    SELECT (SELECT count(*) FROM reassignment_pages q
            WHERE q.run_id = p.run_id AND q.started_at < p.finished_at
              AND p.started_at < q.finished_at) AS overlapping
    FROM reassignment_pages p
    WHERE p.run_id = $1
) o
