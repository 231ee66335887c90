-- Asks the relay to publish parked message $1 again, on behalf of $2; nothing when it was
-- re-published already or does not exist.
UPDATE outbox_parked SET republish_requested_at = now(), republish_requested_by = $2
WHERE id = $1 AND republished_at IS NULL
