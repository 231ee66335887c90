-- The relay of slot $1 framed subject $2's values with schema id $4, the registry's id of
-- the schema of fingerprint $3 (relay_schema_ids, migration V22). A row already there is
-- kept: the relay refused before writing when it disagreed.
INSERT INTO relay_schema_ids (slot_name, subject, fingerprint, schema_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (slot_name, subject, fingerprint) DO NOTHING
