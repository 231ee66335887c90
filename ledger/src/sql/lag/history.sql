-- The lag history of the last $1 seconds in buckets of $2 seconds, oldest first: the worst
-- of each bucket, every column its maximum over the bucket's samples: the lag, the kept
-- WAL, the wait, the highest events position reached, and the events appended per second
-- between one sample and the one before it. The rate of each pair of samples, then its
-- maximum per bucket: a day's bucket of 120 s holds 24 rounds, and the difference of its
-- highest positions would average a burst of 5 s over 120 s (1.7k/s shown as 1.0/s, issue
-- 48). The sample before the window gives the first one its rate. Read by column name.
WITH samples AS (
    SELECT sampled_at, lag_bytes, retained_bytes, waited_seconds, events_position,
           (events_position - lag(events_position) OVER pair)::double precision
               / nullif(extract(epoch FROM sampled_at - lag(sampled_at) OVER pair), 0)::double precision
               AS events_per_second
    FROM lag_samples
    WHERE sampled_at >= now() - make_interval(secs => $1::double precision + $2::double precision)
    WINDOW pair AS (ORDER BY sampled_at)
)
SELECT date_bin(make_interval(secs => $2), sampled_at, TIMESTAMPTZ '2000-01-01 00:00:00+00')
           AS bucket,
       max(lag_bytes) AS lag_bytes,
       max(retained_bytes) AS retained_bytes,
       max(waited_seconds) AS waited_seconds,
       max(greatest(events_per_second, 0)) AS events_per_second
FROM samples
WHERE sampled_at >= now() - make_interval(secs => $1)
GROUP BY bucket
ORDER BY bucket
