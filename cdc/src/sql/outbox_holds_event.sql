-- Whether the outbox still holds the event $1 (history's rule 7: the newest event Kafka
-- holds, committed after the slot's confirmed position).
SELECT 1 FROM outbox WHERE event_id = $1::text::uuid
