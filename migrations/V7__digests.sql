-- Signed digests of the ledger (ledger/src/digest/mod.rs has the byte layouts).

-- Streams whose head moved since the last digest, one row per appending statement and
-- stream, written in the appending transaction by the trigger below. A digest reads, in one
-- REPEATABLE READ snapshot, the rows committed before it and the heads of their streams, then
-- deletes exactly those rows: rows committed later are invisible to it and stay for the next
-- digest. No id or sequence orders anything here (they are not commit order).
CREATE TABLE digest_dirty (
    xid    xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream text NOT NULL
);

-- SECURITY DEFINER: the appending role needs no privilege on digest_dirty.
CREATE FUNCTION mark_digest_dirty() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
    INSERT INTO digest_dirty (stream) SELECT DISTINCT stream FROM appended;
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_mark_digest_dirty AFTER INSERT ON events
    REFERENCING NEW TABLE AS appended
    FOR EACH STATEMENT EXECUTE FUNCTION mark_digest_dirty();

-- The mark `*` stands for every stream: the next digest re-reads them all. It covers the
-- streams that existed before this migration (the trigger's creation above waited for
-- appends in flight and holds off new ones), and `ledger serve` without a digest key puts it
-- back when it clears the marks no builder consumes, so they never pile up.
INSERT INTO digest_dirty (stream) VALUES ('*');

-- The tree's leaves as the newest digest sealed them: one row per stream.
CREATE TABLE digest_leaves (
    stream     text   PRIMARY KEY,
    version    bigint NOT NULL,
    hash       bytea  NOT NULL,
    leaf_hash  bytea  NOT NULL,
    digest_seq bigint NOT NULL
);

-- Append-only: the leaves each digest changed. The leaves of digest N are, per stream, the
-- row with the greatest digest_seq <= N.
CREATE TABLE digest_leaf_changes (
    stream     text   NOT NULL,
    digest_seq bigint NOT NULL,
    version    bigint NOT NULL,
    hash       bytea  NOT NULL,
    PRIMARY KEY (stream, digest_seq)
);

-- Append-only: every digest, signed.
CREATE TABLE digests (
    seq          bigint      PRIMARY KEY CHECK (seq > 0),
    root         bytea       NOT NULL,
    time_micros  bigint      NOT NULL,
    stream_count bigint      NOT NULL,
    event_count  bigint      NOT NULL,
    previous     bytea       NOT NULL,
    signature    bytea       NOT NULL,
    -- SHA-256(signed message || signature): what the next digest's `previous` is.
    hash         bytea       NOT NULL UNIQUE,
    public_key   bytea       NOT NULL,
    changed      bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION refuse_digest_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'digests are append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'RAL01';
END;
$$;
CREATE TRIGGER digests_append_only_rows BEFORE UPDATE OR DELETE ON digests
    FOR EACH ROW EXECUTE FUNCTION refuse_digest_rewrite();
CREATE TRIGGER digests_append_only_truncate BEFORE TRUNCATE ON digests
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_digest_rewrite();
CREATE TRIGGER digest_leaf_changes_append_only_rows BEFORE UPDATE OR DELETE ON digest_leaf_changes
    FOR EACH ROW EXECUTE FUNCTION refuse_digest_rewrite();
CREATE TRIGGER digest_leaf_changes_append_only_truncate BEFORE TRUNCATE ON digest_leaf_changes
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_digest_rewrite();
