-- Slot $1 exists: remember it, so that its loss is noticed ($2: who saw it first), with the
-- publication $3 it streams through and that publication's identity $4, unless known
-- already (a registration from before migration V17 learns them now).
INSERT INTO relay_slots (slot_name, registered_by, publication, publication_identity)
VALUES ($1, $2, $3, $4)
ON CONFLICT (slot_name) DO UPDATE
SET publication = coalesce(relay_slots.publication, EXCLUDED.publication),
    publication_identity = coalesce(relay_slots.publication_identity,
                                    EXCLUDED.publication_identity)
WHERE relay_slots.publication IS NULL OR relay_slots.publication_identity IS NULL
