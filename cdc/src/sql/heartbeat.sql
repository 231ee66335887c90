-- A heartbeat: a transactional message through the slot (prefix $1), so an idle outbox does
-- not pin WAL. Its content is `<slot> <count>`: slot $2's heartbeat count, bumped in the same
-- transaction (migration V17). The relay's position carries the count of the newest
-- heartbeat it covers, and a database restored from a copy taken before that heartbeat has a
-- lower one. Every slot of the database decodes every relay's heartbeats: the slot's name
-- tells whose it is. Empty when the slot is not registered yet. Returns the message's LSN.
WITH beat AS (
    UPDATE relay_slots SET heartbeats = heartbeats + 1 WHERE slot_name = $2
    RETURNING heartbeats
)
SELECT pg_logical_emit_message(true, $1, coalesce($2 || ' ' || (SELECT heartbeats FROM beat), ''))::text
