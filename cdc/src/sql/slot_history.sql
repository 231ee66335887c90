-- Whether slot $1 was registered (the relay or `ledger migrate` had it once), and whether
-- the outbox holds rows (a slot created now would never carry them).
SELECT EXISTS (SELECT 1 FROM relay_slots WHERE slot_name = $1),
       EXISTS (SELECT 1 FROM outbox)
