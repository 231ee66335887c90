-- Parked messages not re-published yet, oldest first (at most 100).
SELECT id, event_id, event_type, topic, error, parked_at, republish_requested_at,
       republish_requested_by, republish_error
FROM outbox_parked
WHERE republished_at IS NULL
ORDER BY id
LIMIT 100
