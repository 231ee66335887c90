-- Parked messages not re-published yet, oldest first (at most $1), with the console's
-- request to republish each and Kafka's answer to the last attempt.
SELECT id, event_id::text, event_type, topic, error, parked_at, republish_requested_at,
       republish_requested_by, republish_error
FROM outbox_parked
WHERE republished_at IS NULL
ORDER BY id
LIMIT $1
