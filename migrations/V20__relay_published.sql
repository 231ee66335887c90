-- What Kafka holds, in the relay's own words (issue 55, item 1).
--
-- Retention used to delete the outbox rows committed before the slot's confirmed position
-- (pg_replication_slots.confirmed_flush_lsn). The relay is not the only one who writes that
-- fact: a slot created from a snapshot counts as confirmed at its consistent point before
-- the snapshot's rows are in Kafka, and a DBA's pg_replication_slot_advance or a peek with
-- pg_logical_slot_get_changes moves it past rows nobody published. One interrupted first
-- publish, and every committed row was deleted and never on Kafka.
--
-- Now retention deletes a row only below `published_lsn`: the relay writes it itself, after
-- Kafka acknowledged everything committed below it (at least once: the messages and the
-- position record; exactly once: the Kafka transaction committed), and only while the
-- registration is ready and of the generation the relay streams under. A snapshot (the
-- first slot, a retry, `ledger relay recover`) starts a new generation with no record, and
-- records its consistent point only once Kafka acknowledged every row it holds, in the same
-- statement that marks the registration ready. `published_system_id` binds the record to
-- the server it describes (an LSN means something in one cluster's WAL only): retention
-- trusts it only on a server of that system identifier.
ALTER TABLE relay_slots
    ADD COLUMN generation          bigint NOT NULL DEFAULT 0,
    ADD COLUMN published_lsn       pg_lsn,
    ADD COLUMN published_system_id text,
    ADD COLUMN published_at        timestamptz;

COMMENT ON COLUMN relay_slots.published_lsn IS
    'Kafka holds every outbox row committed below this LSN: written by the relay only, after Kafka acknowledged; retention deletes nothing else.';

-- The relay roles (those `ledger grant relay` set up) write their record; nobody else is
-- granted it.
DO $$
DECLARE
    relay_role name;
BEGIN
    FOR relay_role IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'relay_slots' AND privilege_type = 'INSERT'
          AND grantee NOT IN (current_user, 'PUBLIC')
    LOOP
        EXECUTE format(
            'GRANT UPDATE (generation, published_lsn, published_system_id, published_at) ON relay_slots TO %I',
            relay_role);
    END LOOP;
END $$;

-- The guard (migration V17) guards the publications of live slots only, and refuses only
-- what the command itself breaks (issue 55, item 3). It used to read every registration's
-- publication: once a registration named a publication later dropped (with the override,
-- its slot long gone), every DDL of the database failed ("publication old_pub would not
-- exist"), a temp table's DROP and future migrations included.
--
-- Guarded: the publication of each registration whose slot exists. Before each guarded
-- command, ra_ledger_outbox_guard_before() notes each guarded publication's problem (NULL
-- when it carries exactly the outbox) in the transaction; after it, the guard refuses when
-- a publication that was right is not any more. A publication already wrong (a bypass, an
-- override) does not block DDL on unrelated objects: the relay refuses to stream through
-- it, and says so.
-- The publication's identity as the relay computes it (cdc/src/relay/publication.rs,
-- `check`): its row's OID and version, the outbox's OID, and the outbox's membership row's
-- OID and version. NULL when it does not carry the outbox.
CREATE FUNCTION ra_ledger_publication_identity(publication name) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('publication %s@%s outbox %s membership %s@%s',
                  p.oid, p.xmin, r.prrelid, r.oid, r.xmin)
    FROM pg_publication p
    JOIN pg_publication_rel r ON r.prpubid = p.oid AND r.prrelid = to_regclass('outbox')
    WHERE p.pubname = publication
$$;

-- Each guarded publication (of a live slot's registration) with its problem (NULL when it
-- carries exactly the outbox) and its identity.
CREATE FUNCTION ra_ledger_guarded_publications() RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_object_agg(p.publication, jsonb_build_object(
               'problem', ra_ledger_publication_problem(p.publication),
               'identity', ra_ledger_publication_identity(p.publication))),
           '{}'::jsonb)
    FROM (SELECT DISTINCT r.publication
          FROM relay_slots r
          WHERE r.publication IS NOT NULL
            AND EXISTS (SELECT 1 FROM pg_replication_slots s
                        WHERE s.slot_name = r.slot_name AND s.database = current_database())) p
$$;

CREATE OR REPLACE FUNCTION ra_ledger_outbox_guard_before() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM set_config('ra_ledger.guard_before', ra_ledger_guarded_publications()::text, true);
END $$;

-- After the command: refused when a guarded publication that was right is not any more.
-- When it is still right but its identity changed (a no-op `SET (publish = 'insert')`,
-- `OWNER TO`), and its identity before the command was the one the registrations record,
-- the guard records the new one (issue 55, item 4): it saw the publication right at the end
-- of every command since, so the change is harmless, and the relay accepts it. A change the
-- guard did not see (a bypass, `REASSIGN OWNED`, which no event trigger sees) breaks that
-- chain, and the relay refuses it as before.
CREATE OR REPLACE FUNCTION ra_ledger_outbox_guard() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    before_text text := nullif(current_setting('ra_ledger.guard_before', true), '');
    before jsonb := coalesce(before_text::jsonb, '{}'::jsonb);
    guarded text;
    now_state jsonb;
    problem text;
BEGIN
    IF coalesce(current_setting('ra_ledger.allow_outbox_publication_change', true), '') IN ('on', 'true') THEN
        RETURN;
    END IF;
    FOR guarded, now_state IN SELECT key, value FROM jsonb_each(ra_ledger_guarded_publications())
    LOOP
        problem := now_state ->> 'problem';
        -- Refused when this command broke it: it was right before (or the before-trigger
        -- is not installed, and then nothing is known of before).
        IF problem IS NOT NULL
           AND (before_text IS NULL OR NOT (before ? guarded)
                OR before -> guarded ->> 'problem' IS NULL) THEN
            RAISE EXCEPTION 'refused: after this %, %', tg_tag, problem
                USING ERRCODE = 'object_in_use',
                      DETAIL = 'The CDC relay streams the outbox through this publication; outbox rows committed while it does not carry the outbox are never in the stream.',
                      HINT = 'If you mean it, SET ra_ledger.allow_outbox_publication_change = on in this session, then run `ledger relay recover` (docs/operators.md, "What the relay checks").';
        END IF;
        IF problem IS NULL AND before ? guarded
           AND before -> guarded ->> 'problem' IS NULL
           AND before -> guarded ->> 'identity' IS DISTINCT FROM now_state ->> 'identity' THEN
            UPDATE relay_slots
            SET publication_identity = now_state ->> 'identity'
            WHERE publication = guarded
              AND publication_identity = before -> guarded ->> 'identity';
        END IF;
    END LOOP;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ra_ledger_outbox_guard() SET search_path = %I, pg_catalog',
                   current_schema());
    EXECUTE format('ALTER FUNCTION ra_ledger_outbox_guard_before() SET search_path = %I, pg_catalog',
                   current_schema());
    EXECUTE format('ALTER FUNCTION ra_ledger_guarded_publications() SET search_path = %I, pg_catalog',
                   current_schema());
    EXECUTE format('ALTER FUNCTION ra_ledger_publication_identity(name) SET search_path = %I, pg_catalog',
                   current_schema());
END $$;

-- Both triggers, enabled ALWAYS: a session with session_replication_role = replica no
-- longer switches the guard off unseen (issue 55, item 6); what still can (the trigger
-- disabled, event_triggers = off, the override set for a role or a database) the relay
-- names.
CREATE OR REPLACE FUNCTION ra_ledger_install_outbox_guard() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ra_ledger_outbox_guard') THEN
        CREATE EVENT TRIGGER ra_ledger_outbox_guard ON ddl_command_end
            WHEN TAG IN ('ALTER PUBLICATION', 'DROP PUBLICATION', 'ALTER TABLE', 'DROP TABLE',
                         'ALTER SCHEMA', 'DROP SCHEMA', 'DROP OWNED')
            EXECUTE FUNCTION ra_ledger_outbox_guard();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ra_ledger_outbox_guard_before') THEN
        CREATE EVENT TRIGGER ra_ledger_outbox_guard_before ON ddl_command_start
            WHEN TAG IN ('ALTER PUBLICATION', 'DROP PUBLICATION', 'ALTER TABLE', 'DROP TABLE',
                         'ALTER SCHEMA', 'DROP SCHEMA', 'DROP OWNED')
            EXECUTE FUNCTION ra_ledger_outbox_guard_before();
    END IF;
    ALTER EVENT TRIGGER ra_ledger_outbox_guard ENABLE ALWAYS;
    ALTER EVENT TRIGGER ra_ledger_outbox_guard_before ENABLE ALWAYS;
END $$;

DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        PERFORM ra_ledger_install_outbox_guard();
    ELSIF EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ra_ledger_outbox_guard') THEN
        RAISE WARNING 'the outbox guard needs its second event trigger, which needs a superuser: run SELECT ra_ledger_install_outbox_guard() as one in this database';
    END IF;
END $$;
