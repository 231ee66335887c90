-- Each digest's index leaf (issue 56, item 2; ledger/src/digest/index.rs has the layout): the
-- root of an index over every stream's head and its events' log positions, appended to the
-- transparency log after the digest's events, so that the checkpoint the witnesses cosign
-- ends with it. NULL for the digests sealed before: their checkpoints end with an event.
--
-- digests stays append-only (V7's triggers): the leaf is written with the row, never after.
ALTER TABLE digests
    ADD COLUMN index_leaf bytea CHECK (index_leaf IS NULL OR length(index_leaf) = 80);
