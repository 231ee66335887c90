-- Slot $1's row in relay_slots, if the relay (or a recovery) ever had the slot: the
-- publication it streams through and its identity then, and whether the rows committed
-- before the slot's consistent point were published, its heartbeat count, the generation
-- its record of what Kafka holds belongs to, and that record (migration V20).
SELECT publication, publication_identity, ready, heartbeats, generation, published_lsn::text
FROM relay_slots
WHERE slot_name = $1
