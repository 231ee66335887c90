-- Which signed message a digest's signature is of (ledger/src/digest/mod.rs): 1 for the
-- digests sealed before their number was signed, 2 since (issue 35, item 5). The default
-- is 1, the version of every row already here and of any row a binary of before this
-- migration writes; this release writes 2. No rewrite of the append-only table: a constant
-- default is stored in the catalog.
ALTER TABLE digests
    ADD COLUMN message_version smallint NOT NULL DEFAULT 1 CHECK (message_version IN (1, 2));
