-- The schema ids each relay framed its topics with (issue 57, item 3): per slot and registry
-- subject, the id the registry answered for a schema, known by its fingerprint (the SHA-256
-- of the .proto text). Records kept for good carry these ids; after a registry was lost or
-- restored, the same schema may get another id, or an id may name another schema, and those
-- records would dangle or decode with the wrong schema. A relay that starts compares what
-- the registry answers with what is recorded here and refuses a difference, naming the fix
-- (cdc/src/relay/schema_ids.rs). A new schema (another fingerprint) adds a row: the ids of
-- the older ones stay, as the records framed with them do.
CREATE TABLE relay_schema_ids (
    slot_name   text        NOT NULL,
    subject     text        NOT NULL,
    fingerprint text        NOT NULL,
    schema_id   integer     NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot_name, subject, fingerprint)
);

COMMENT ON TABLE relay_schema_ids IS
    'The schema registry id each relay framed a subject''s values with, per schema fingerprint; a relay refuses a registry that answers another.';

-- The relay roles (those `ledger grant relay` set up: they may insert into relay_slots) read
-- and add their ids.
DO $$
DECLARE
    relay_role name;
BEGIN
    FOR relay_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'relay_slots' AND privilege_type = 'INSERT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format('GRANT SELECT, INSERT ON relay_schema_ids TO %I', relay_role);
    END LOOP;
END $$;
