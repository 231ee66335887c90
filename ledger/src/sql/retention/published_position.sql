-- What the relay recorded Kafka holds for slot $1 (relay_slots.published_lsn, migration
-- V20): every outbox row committed below it was acknowledged by Kafka. NULL, and nothing is
-- deleted, while the registration is not ready (a snapshot's rows are being published), has
-- no record yet, or the record was written on another server than this one (an LSN means
-- something in one cluster's WAL only: a dump restored elsewhere keeps the row). Never the
-- slot's confirmed position: PostgreSQL sets that at a new slot's consistent point before
-- the snapshot's rows are in Kafka, and a DBA's pg_replication_slot_advance moves it.
SELECT r.published_lsn::text
FROM relay_slots r
WHERE r.slot_name = $1
  AND r.ready
  AND r.published_system_id = (SELECT system_identifier::text FROM pg_control_system())
