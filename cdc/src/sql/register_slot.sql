-- Slot $1 exists: remember it, so that its loss is noticed ($2: who saw it first).
INSERT INTO relay_slots (slot_name, registered_by) VALUES ($1, $2)
ON CONFLICT (slot_name) DO NOTHING
