-- The database, not the writer, sets events.recorded_at (issue 56, item 2). Before, the
-- service's own role could INSERT an event with any recorded_at, and two events written
-- after a digest with a recorded_at before its time changed the proven answer "as known at"
-- that time (the backdated append of the issue).
--
-- The writer must know recorded_at before it inserts: the event's hash and its protobuf
-- envelope cover it, and the projections repeat it. So the database keeps one clock reading
-- per transaction, taken by recording_clock() after the transaction has its id (the digest
-- builder's argument, ledger/src/digest/build.rs, needs the id first), and the trigger below
-- writes that reading into every event the transaction inserts, whatever the writer sent.
-- The service reads it in sql/stream_heads.sql and hashes the same value; a writer that
-- sends another one gets the server's time in the row, and its hash no longer matches
-- (`ledger verify` names the broken link).

-- One row per writing transaction: its clock reading. UNLOGGED: a crash ends every
-- transaction that could read it. The digest builder removes the rows of ended
-- transactions (prune_recording_clock()).
CREATE UNLOGGED TABLE recording_clock (
    xid xid8        PRIMARY KEY,
    at  timestamptz NOT NULL
);

-- The transaction's recording time: the server's clock, read now, after the transaction's
-- id was given out, and never earlier than a reading this transaction took before (a
-- writer that reads its heads twice records the later time). SECURITY DEFINER: the
-- writing role may call it but not write recording_clock.
CREATE FUNCTION recording_clock() RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
    me      xid8        := pg_current_xact_id();
    reading timestamptz := clock_timestamp();
BEGIN
    INSERT INTO recording_clock AS r (xid, at) VALUES (me, reading)
    ON CONFLICT (xid) DO UPDATE SET at = greatest(r.at, excluded.at)
    RETURNING r.at INTO reading;
    RETURN reading;
END;
$$;

-- Every inserted event gets its transaction's recording time; an UPDATE of it is refused
-- (events_append_only_rows refuses every UPDATE already; this one names the column).
CREATE FUNCTION events_recorded_at_from_clock() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'events.recorded_at is set by the database, never changed: UPDATE refused'
            USING ERRCODE = 'RAL01',
                  HINT = 'Correct history by appending a new event.';
    END IF;
    NEW.recorded_at := coalesce(
        (SELECT at FROM recording_clock WHERE xid = pg_current_xact_id()),
        recording_clock());
    RETURN NEW;
END;
$$;
CREATE TRIGGER events_recorded_at_from_clock BEFORE INSERT OR UPDATE OF recorded_at ON events
    FOR EACH ROW EXECUTE FUNCTION events_recorded_at_from_clock();

-- Removes the readings of transactions that ended (every id below the oldest one still
-- running); returns how many. The digest builder calls it with each digest, `ledger serve`
-- without a digest key when it clears the marks.
CREATE FUNCTION prune_recording_clock() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
    WITH removed AS (
        DELETE FROM recording_clock WHERE xid < pg_snapshot_xmin(pg_current_snapshot())
        RETURNING 1
    )
    SELECT count(*) FROM removed
$$;
