-- The replication slots the relay has streamed from (or `ledger migrate` created for it).
--
-- A slot lives outside the tables: a promotion without failover slots, a restore from a
-- backup or a drop leaves the database without it, and a slot created anew starts at the
-- current WAL position, so whatever was committed since the old slot's position would never
-- reach Kafka. This table is restored and replicated with the data: when the relay finds a
-- slot missing that is listed here, it stops and names the recovery (`ledger relay
-- recover`) instead of creating one in silence.
CREATE TABLE relay_slots (
    slot_name     text        PRIMARY KEY,
    registered_at timestamptz NOT NULL DEFAULT now(),
    -- `relay`, `migrate` or `recover`: who saw the slot first.
    registered_by text        NOT NULL
);

COMMENT ON TABLE relay_slots IS
    'Replication slots the relay has had; a missing one was lost, and is never re-created silently.';

-- The relay roles `ledger grant relay` set up before this table existed may write it: they
-- are the roles that may insert parked messages.
DO $$
DECLARE
    relay_role name;
BEGIN
    FOR relay_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'outbox_parked' AND privilege_type = 'INSERT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format('GRANT SELECT, INSERT ON relay_slots TO %I', relay_role);
    END LOOP;
END $$;
