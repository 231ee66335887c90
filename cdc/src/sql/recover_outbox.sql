-- Recovery, in the new slot's snapshot: every outbox row still kept (retention removes
-- only rows a slot confirmed), not parked, in id order. Within one aggregate that is the
-- order of its events: a stream's next version is written only after the previous one
-- committed. The 32-bit transaction id is pgoutput's, the live `txid` header's.
SELECT o.id, o.event_id::text, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
       o.traceparent, o.txid::text::bigint & 4294967295
FROM outbox o
WHERE NOT EXISTS (SELECT 1 FROM outbox_parked p WHERE p.event_id = o.event_id)
ORDER BY o.id
