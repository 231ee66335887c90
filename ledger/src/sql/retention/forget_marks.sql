-- Marks behind $1, once the rows under it are removed: newer marks cover the rest. The mark
-- at $1 itself, the newest the slot confirmed, is kept: its time is what the console's lag in
-- time reads (everything committed before it is published). The next round removes nothing
-- more under it and forgets it once the slot confirmed a newer one.
DELETE FROM outbox_retention_marks WHERE lsn < $1::text::pg_lsn
