-- The relay's report of its lag for slot $1 (relay_lag_reports, migration V18) and whether
-- a relay streams from the slot now: what `ledger serve` reads five times a second so its
-- gauge follows the relay within a scrape (ledger/src/lag/exact.rs). No row: no slot.
-- Read by column name, with the same names as slot_progress.sql.
SELECT s.active AS streaming,
       r.oldest_unconfirmed_commit_at AS relay_oldest_unconfirmed,
       r.reported_at IS NOT NULL AS relay_reported,
       (extract(epoch FROM clock_timestamp() - r.reported_at) * 1000)::bigint AS relay_report_age_ms
FROM pg_replication_slots s
LEFT JOIN relay_lag_reports r ON r.slot_name = s.slot_name
WHERE s.slot_name = $1
