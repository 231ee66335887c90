-- Time inside a run's page transactions, and the gaps between them.
SELECT coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8,
       coalesce(avg(gap), 0)::float8,
       coalesce(max(gap), 0)::float8
FROM (
    SELECT started_at, finished_at,
           extract(epoch FROM started_at - lag(finished_at) OVER (ORDER BY page)) AS gap
    FROM reassignment_pages
    WHERE run_id = $1
) p
