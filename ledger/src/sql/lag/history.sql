-- The lag history of the last $1 seconds in buckets of $2 seconds, oldest first: the worst
-- lag, kept WAL and wait of each bucket, and the highest events position reached in it.
SELECT date_bin(make_interval(secs => $2), sampled_at, TIMESTAMPTZ '2000-01-01 00:00:00+00')
           AS bucket,
       max(lag_bytes), max(retained_bytes), max(waited_seconds), max(events_position)
FROM lag_samples
WHERE sampled_at >= now() - make_interval(secs => $1)
GROUP BY bucket
ORDER BY bucket
