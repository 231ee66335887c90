-- What `ledger serve`'s gauges read besides the slot: parked messages not republished yet,
-- and whether changes wait for a signed digest (digest_dirty holds a mark) with the time of
-- the newest digest, or, before the first digest, of the first event.
SELECT (SELECT count(*) FROM outbox_parked WHERE republished_at IS NULL),
       EXISTS (SELECT 1 FROM digest_dirty),
       coalesce((SELECT max(created_at) FROM digests),
                (SELECT recorded_at FROM events ORDER BY position LIMIT 1))
