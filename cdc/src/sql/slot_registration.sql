-- Slot $1's row in relay_slots, if the relay (or a recovery) ever had the slot: the
-- publication it streams through and its identity then, and whether the rows committed
-- before the slot's consistent point were published, and its heartbeat count.
SELECT publication, publication_identity, ready, heartbeats FROM relay_slots
WHERE slot_name = $1
