-- A slot created with a snapshot ($1, by $2: `relay` for the first one, `recover`): its
-- publication $3 and identity $4 start anew, and $5 says whether the rows the snapshot
-- holds are all in Kafka yet. Until then a crash leaves it not ready, and the next start
-- publishes from a new snapshot again.
--
-- Not ready: a new generation begins, with no record of what Kafka holds (migration V20),
-- so retention deletes nothing until the snapshot's rows are acknowledged. Ready: the
-- generation's first record is the slot's consistent point $6 on the server $7, written in
-- the same statement: every outbox row committed before it was in the snapshot, and Kafka
-- acknowledged them all. Returns the generation.
INSERT INTO relay_slots (slot_name, registered_by, publication, publication_identity, ready,
                         generation, published_lsn, published_system_id, published_at)
VALUES ($1, $2, $3, $4, $5, 1, CASE WHEN $5 THEN $6::text::pg_lsn END,
        CASE WHEN $5 THEN $7::text END, CASE WHEN $5 THEN now() END)
ON CONFLICT (slot_name) DO UPDATE
SET publication = EXCLUDED.publication,
    publication_identity = EXCLUDED.publication_identity,
    ready = EXCLUDED.ready,
    generation = relay_slots.generation + CASE WHEN EXCLUDED.ready THEN 0 ELSE 1 END,
    published_lsn = CASE WHEN EXCLUDED.ready THEN $6::text::pg_lsn END,
    published_system_id = CASE WHEN EXCLUDED.ready THEN $7 END,
    published_at = CASE WHEN EXCLUDED.ready THEN now() END
RETURNING generation
