-- The relay's record that Kafka holds every outbox row of slot $1 committed below $4 (`X/Y`),
-- on the server whose system identifier is $3 (migration V20). Written only after Kafka
-- acknowledged all of it, only under the registration generation $2 the session streams
-- under and while that registration is ready: a snapshot begun meanwhile (a recovery) has
-- its own generation, and this session's word does not cover it. Never moves back on the
-- same server. Returns whether it wrote.
UPDATE relay_slots
SET published_lsn = $4::text::pg_lsn,
    published_system_id = $3,
    published_at = now()
WHERE slot_name = $1
  AND generation = $2
  AND ready
  AND (published_lsn IS NULL
       OR published_lsn < $4::text::pg_lsn
       OR published_system_id IS DISTINCT FROM $3)
RETURNING true
