-- What the relay depends on in the database, kept where the relay can check it (issue 50).
--
-- The relay's promise, "duplicates are possible, loss is not", rests on the publication
-- carrying exactly the outbox: pgoutput decides what to send from the catalog as it was at
-- each point of the WAL, so a publication that stops carrying the outbox for a moment loses
-- the rows committed in that moment from the stream for good, and the relay would confirm
-- the slot past them without a word.

-- Per slot: the publication it streams through, and that publication's identity when the
-- relay last found it right (the OIDs and row versions of its catalog rows, see
-- cdc/src/relay/publication.rs). A publication dropped and re-created, altered and altered
-- back, or swapped for another has another identity, even when it looks right now.
ALTER TABLE relay_slots
    ADD COLUMN publication          text,
    ADD COLUMN publication_identity text,
    -- Bumped by every relay heartbeat, in the transaction that writes the heartbeat to the
    -- WAL: a server restored from a copy taken before a heartbeat has a lower count than the
    -- position Kafka holds (cdc/src/history.rs, `Rewound`).
    ADD COLUMN heartbeats           bigint  NOT NULL DEFAULT 0,
    -- False while the rows committed before the slot's consistent point are published from
    -- its snapshot (the first slot, `ledger relay recover`): a slot left so by a crash is
    -- done again, never streamed as if nothing were missing.
    ADD COLUMN ready                boolean NOT NULL DEFAULT true;

-- The relay roles (those `ledger grant relay` set up) may keep these up to date.
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
            'GRANT UPDATE (publication, publication_identity, heartbeats, ready) ON relay_slots TO %I',
            relay_role);
    END LOOP;
END $$;

-- Why `publication` does not carry exactly the outbox as the relay reads it, or NULL when
-- it does: the table named outbox (by the search path), all its columns, no row filter,
-- inserts only, nothing else. The relay checks the same rules itself, and more (the
-- identity above); this is for the guard below.
CREATE FUNCTION ra_ledger_publication_problem(publication name) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    pub pg_publication%ROWTYPE;
    outbox regclass := to_regclass('outbox');
    carried text;
    wrong text;
BEGIN
    SELECT * INTO pub FROM pg_publication WHERE pubname = publication;
    IF NOT FOUND THEN
        RETURN format('publication %I would not exist', publication);
    END IF;
    IF outbox IS NULL THEN
        RETURN 'there would be no table named outbox';
    END IF;
    IF pub.puballtables THEN
        RETURN format('publication %I would be FOR ALL TABLES', publication);
    END IF;
    IF NOT pub.pubinsert OR pub.pubupdate OR pub.pubdelete OR pub.pubtruncate THEN
        RETURN format('publication %I would not publish inserts only', publication);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_publication_namespace WHERE pnpubid = pub.oid) THEN
        RETURN format('publication %I would carry whole schemas', publication);
    END IF;
    SELECT string_agg(prrelid::regclass::text, ', ' ORDER BY prrelid::regclass::text)
      INTO carried
      FROM pg_publication_rel WHERE prpubid = pub.oid AND prrelid <> outbox;
    IF carried IS NOT NULL THEN
        RETURN format('publication %I would carry %s besides the outbox', publication, carried);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_publication_rel WHERE prpubid = pub.oid AND prrelid = outbox) THEN
        RETURN format('publication %I would not carry %s', publication, outbox);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_publication_rel
               WHERE prpubid = pub.oid AND prrelid = outbox
                 AND (prqual IS NOT NULL OR prattrs IS NOT NULL)) THEN
        RETURN format('publication %I would carry %s with a row filter or a column list',
                      publication, outbox);
    END IF;
    SELECT string_agg(required, ', ') INTO wrong
      FROM unnest(ARRAY['id', 'event_id', 'aggregate_type', 'aggregate_id', 'event_type',
                        'payload']) AS required
     WHERE NOT EXISTS (SELECT 1 FROM pg_attribute
                       WHERE attrelid = outbox AND attname = required AND NOT attisdropped);
    IF wrong IS NOT NULL THEN
        RETURN format('%s would lack the columns the relay reads: %s', outbox, wrong);
    END IF;
    SELECT string_agg(format('%s %s', attname, format_type(atttypid, atttypmod)), ', ')
      INTO wrong
      FROM pg_attribute
     WHERE attrelid = outbox AND attnum > 0 AND NOT attisdropped
       AND (attname, atttypid) IN (('id', 'bigint'::regtype), ('event_id', 'uuid'::regtype),
                                   ('aggregate_type', 'text'::regtype),
                                   ('aggregate_id', 'text'::regtype),
                                   ('event_type', 'text'::regtype), ('payload', 'bytea'::regtype),
                                   ('traceparent', 'text'::regtype)) IS NOT TRUE
       AND attname IN ('id', 'event_id', 'aggregate_type', 'aggregate_id', 'event_type',
                       'payload', 'traceparent');
    IF wrong IS NOT NULL THEN
        RETURN format('%s would have columns of types the relay does not read: %s', outbox, wrong);
    END IF;
    RETURN NULL;
END $$;

-- The guard: after a command that could take the outbox out of the relay's publication (or
-- change what the relay reads), it refuses the command unless the publication still carries
-- exactly the outbox. An operator who means it says so in the session:
--   SET ra_ledger.allow_outbox_publication_change = on;
-- and then runs `ledger relay recover` (docs/operators.md, "What the relay checks").
-- Guarded: the publications the relay's slots stream through (`relay_slots.publication`).
-- Before a relay first streamed there is nothing to guard: its first slot publishes what
-- its snapshot holds, and it creates a missing publication then. SECURITY DEFINER: any
-- role's DDL fires it, and must not need to read relay_slots itself.
CREATE FUNCTION ra_ledger_outbox_guard() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    guarded text;
    problem text;
BEGIN
    IF coalesce(current_setting('ra_ledger.allow_outbox_publication_change', true), '') IN ('on', 'true') THEN
        RETURN;
    END IF;
    FOR guarded IN
        SELECT DISTINCT publication FROM relay_slots WHERE publication IS NOT NULL
    LOOP
        problem := ra_ledger_publication_problem(guarded);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'refused: after this %, %', tg_tag, problem
                USING ERRCODE = 'object_in_use',
                      DETAIL = 'The CDC relay streams the outbox through this publication; outbox rows committed while it does not carry the outbox are never in the stream.',
                      HINT = 'If you mean it, SET ra_ledger.allow_outbox_publication_change = on in this session, then run `ledger relay recover` (docs/operators.md, "What the relay checks").';
        END IF;
    END LOOP;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ra_ledger_outbox_guard() SET search_path = %I, pg_catalog',
                   current_schema());
END $$;

-- Event triggers need a superuser. `ledger migrate` as one installs the guard; as the owner
-- role it warns, and a superuser runs `SELECT ra_ledger_install_outbox_guard()` once
-- (deploy/stack does).
CREATE FUNCTION ra_ledger_install_outbox_guard() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ra_ledger_outbox_guard') THEN
        CREATE EVENT TRIGGER ra_ledger_outbox_guard ON ddl_command_end
            WHEN TAG IN ('ALTER PUBLICATION', 'DROP PUBLICATION', 'ALTER TABLE', 'DROP TABLE',
                         'ALTER SCHEMA', 'DROP SCHEMA', 'DROP OWNED')
            EXECUTE FUNCTION ra_ledger_outbox_guard();
    END IF;
END $$;

DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        PERFORM ra_ledger_install_outbox_guard();
    ELSE
        RAISE WARNING 'the outbox guard (an event trigger) needs a superuser: run SELECT ra_ledger_install_outbox_guard() as one in this database';
    END IF;
END $$;
