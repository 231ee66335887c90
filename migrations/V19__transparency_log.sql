-- The transparency log over the events (issue 47; ledger/src/tlog/mod.rs). Its leaves are
-- the events' hashes in the order the digests sealed them, derived from
-- digest_leaf_changes and events (ledger/src/sql/tlog/log_leaves.sql): no copy to drift.
-- (V19, not V18: another branch holds V18.)

-- Append-only: the checkpoint each digest sealed, a C2SP signed note by the digest key.
CREATE TABLE checkpoints (
    digest_seq bigint PRIMARY KEY REFERENCES digests (seq),
    size       bigint NOT NULL CHECK (size >= 0),
    root       bytea  NOT NULL,
    note       text   NOT NULL
);
CREATE TRIGGER checkpoints_append_only_rows BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION refuse_digest_rewrite();
CREATE TRIGGER checkpoints_append_only_truncate BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_digest_rewrite();

-- Append-only: each witness's cosignature line of a checkpoint, as it answered.
CREATE TABLE cosignatures (
    digest_seq  bigint      NOT NULL REFERENCES checkpoints (digest_seq),
    witness     text        NOT NULL,
    line        text        NOT NULL,
    cosigned_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (digest_seq, witness)
);
CREATE TRIGGER cosignatures_append_only_rows BEFORE UPDATE OR DELETE ON cosignatures
    FOR EACH ROW EXECUTE FUNCTION refuse_digest_rewrite();

-- Append-only: which cosigned checkpoints were published on the digest topic (through the
-- outbox, in the same transaction): once short of the quorum, once when it is met.
CREATE TABLE checkpoint_publications (
    digest_seq bigint  NOT NULL REFERENCES checkpoints (digest_seq),
    quorum     boolean NOT NULL,
    PRIMARY KEY (digest_seq, quorum)
);

-- What each witness said last: the size it holds as far as the ledger knows (the `old` of
-- the next request), and the outcome of the last request (0 cosigned, 1 unavailable,
-- 2 refused: ledger/src/tlog/cosign.rs `Outcome`), with the witness's reason.
CREATE TABLE witness_state (
    witness    text        PRIMARY KEY,
    size       bigint      NOT NULL DEFAULT 0,
    digest_seq bigint,
    outcome    smallint    NOT NULL CHECK (outcome IN (0, 1, 2)),
    reason     text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
