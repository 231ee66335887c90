-- The next selected events of the past after position $1, up to position $2 (a bounded
-- window), at most $9 of them, in position order. `xid` is the transaction's 32-bit id,
-- the live `txid` header's value (pgoutput's Begin carries it; xid8 adds the epoch above
-- its 32 bits); NULL for events appended before the column existed.
SELECT position, event_id::text AS event_id, stream, event_type, payload,
       txid::text::bigint & 4294967295 AS xid, traceparent
FROM events
WHERE position > $1 AND position <= $2
  AND (txid IS NULL OR pg_visible_in_snapshot(txid, $3::text::pg_snapshot))
  AND split_part(stream, '-', 1) = ANY ($4::text[])
  AND ($5::text[] IS NULL OR event_type = ANY ($5))
  AND ($6::text IS NULL OR starts_with(stream, $6))
  AND ($7::timestamptz IS NULL OR recorded_at >= $7)
  AND ($8::timestamptz IS NULL OR recorded_at < $8)
ORDER BY position
LIMIT $9
