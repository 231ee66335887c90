-- A slot created with a snapshot ($1, by $2: `relay` for the first one, `recover`): its
-- publication $3 and identity $4 start anew, and $5 says whether the rows the snapshot
-- holds are all in Kafka yet. Until then a crash leaves it not ready, and the next start
-- publishes from a new snapshot again.
INSERT INTO relay_slots (slot_name, registered_by, publication, publication_identity, ready)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (slot_name) DO UPDATE
SET publication = EXCLUDED.publication,
    publication_identity = EXCLUDED.publication_identity,
    ready = EXCLUDED.ready
