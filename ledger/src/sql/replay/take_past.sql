-- In the REPEATABLE READ transaction that defines the past: its snapshot, the highest
-- position it sees, and how many selected events of each aggregate type it holds.
SELECT pg_current_snapshot()::text AS snapshot,
       coalesce((SELECT max(position) FROM events), 0) AS past_end,
       coalesce((SELECT jsonb_object_agg(aggregate, events)
                 FROM (SELECT split_part(stream, '-', 1) AS aggregate, count(*) AS events
                       FROM events
                       WHERE split_part(stream, '-', 1) = ANY ($1::text[])
                         AND ($2::text[] IS NULL OR event_type = ANY ($2))
                         AND ($3::text IS NULL OR starts_with(stream, $3))
                         AND ($4::timestamptz IS NULL OR recorded_at >= $4)
                         AND ($5::timestamptz IS NULL OR recorded_at < $5)
                       GROUP BY 1) AS counted), '{}'::jsonb) AS topic_events
