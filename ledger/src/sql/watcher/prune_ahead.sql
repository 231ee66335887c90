-- Of the ids $1 read from Kafka ahead of the window, those still to watch: events above
-- the watermark $2. The others are copies of settled events, or no event; a record of an
-- event listed missing is proof Kafka holds it after all, so its row goes.
WITH known AS (
    SELECT event_id, position FROM events WHERE event_id = ANY ($1::uuid[])
), found AS (
    DELETE FROM watcher_missing m
    USING known k
    WHERE m.event_id = k.event_id AND k.position <= $2
)
SELECT event_id FROM known WHERE position > $2
