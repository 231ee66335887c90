-- The newest mark the relay's record has passed ($1: relay_slots.published_lsn). The ORDER BY
-- names the table's column: unqualified, `lsn` would be the output column, the text, and
-- text sorts '0/D9EC838' above '0/1B7406D0' and 'F/FF000028' above '10/0', so the same
-- old mark would win every round once the WAL position grows a digit.
SELECT m.lsn::text, m.oldest_xact::text, m.max_id
FROM outbox_retention_marks m
WHERE m.lsn <= $1::text::pg_lsn
ORDER BY m.lsn DESC
LIMIT 1
