-- The relay's record that Kafka holds every outbox row of slot $1 committed below it, on the
-- server whose system identifier is $3 (migration V20). $4 (`X/Y`) is what the relay
-- confirmed once Kafka acknowledged all of it; the record is the lesser of it and the
-- slot's confirmed position as PostgreSQL has it, so it is never ahead of the slot: a crash
-- before PostgreSQL heard of the confirm leaves the slot resending rows retention kept, and
-- exactly once's check that the newest event Kafka holds past the slot is still in the
-- outbox (cdc/src/history.rs, rule 7) stays true. (The protocol model found that race:
-- docs/protocol.md.) Written only under the registration generation $2 the session
-- streams under and while that registration is ready: a snapshot begun meanwhile (a
-- recovery) has its own generation, and this session's word does not cover it. Never
-- moves back on the same server. Returns what it wrote.
WITH held AS (
    SELECT least($4::text::pg_lsn,
                 coalesce((SELECT confirmed_flush_lsn FROM pg_replication_slots
                           WHERE slot_name = $1 AND database = current_database()),
                          '0/0'::pg_lsn)) AS lsn
)
UPDATE relay_slots r
SET published_lsn = held.lsn,
    published_system_id = $3,
    published_at = now()
FROM held
WHERE r.slot_name = $1
  AND r.generation = $2
  AND r.ready
  AND held.lsn > '0/0'::pg_lsn
  AND (r.published_lsn IS NULL
       OR r.published_lsn < held.lsn
       OR r.published_system_id IS DISTINCT FROM $3)
RETURNING r.published_lsn::text
