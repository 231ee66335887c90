-- The committed events above position $1 whose aggregate types have event topics ($3),
-- lowest positions first, at most $2, and the events at positions $5 (pending already, and
-- asked again for their age), each with whether it was recorded longer than the lag bound
-- ($4 seconds) ago by the database's clock.
(SELECT position, event_id, recorded_at < now() - make_interval(secs => $4) AS overdue
 FROM events
 WHERE position > $1
   AND split_part(stream, '-', 1) = ANY ($3::text[])
 ORDER BY position
 LIMIT $2)
UNION ALL
SELECT position, event_id, recorded_at < now() - make_interval(secs => $4) AS overdue
FROM events
WHERE position = ANY ($5::bigint[])
