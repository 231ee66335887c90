-- One sample of the lag history ($1 lag bytes, $2 kept WAL bytes, $3 seconds waited), in
-- the bucket of $4 seconds the statement's time falls in: several services on one database
-- write one sample per bucket. Samples older than $5 seconds go in the same statement.
WITH forgotten AS (
    DELETE FROM lag_samples WHERE sampled_at < now() - make_interval(secs => $5)
)
INSERT INTO lag_samples (sampled_at, lag_bytes, retained_bytes, waited_seconds, events_position)
SELECT date_bin(make_interval(secs => $4), now(), TIMESTAMPTZ '2000-01-01 00:00:00+00'),
       $1, $2, $3, coalesce(max(position), 0)
FROM events
ON CONFLICT (sampled_at) DO NOTHING
