-- The digest and the outbox row that publishes it, in one statement of the building
-- transaction. $1-$10 and $14 the digests row ($14 the signed message's version, $15 its index leaf), $11 the
-- event id, $12 the aggregate type, $13 the JSON document.
WITH digest AS (
    INSERT INTO digests (seq, root, time_micros, stream_count, event_count, previous,
                         signature, hash, public_key, changed, message_version, index_leaf)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $14, $15)
)
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
VALUES ($11, $12, 'ledger', 'DigestSealed', $13)
