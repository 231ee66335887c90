-- What the verdict needs besides the slot (ledger/src/verdict): whether relay_slots lists
-- slot $1 (a missing slot a relay streamed from was lost), why its relay refused to go on
-- when it did (relay_lag_reports.refused, migration V18), the parked messages not
-- republished, and the replays that failed in the last day with the newest one's id (not
-- its error: /status answers without a token; the console's replay list has the errors),
-- and the committed events the end-to-end watcher found missing from Kafka (V21).
-- Read by column name.
SELECT EXISTS (SELECT 1 FROM relay_slots WHERE slot_name = $1) AS slot_registered,
       (SELECT refused FROM relay_lag_reports WHERE slot_name = $1) AS relay_refused,
       (SELECT count(*) FROM outbox_parked WHERE republished_at IS NULL) AS parked_waiting,
       (SELECT count(*) FROM replays
        WHERE status = 'failed'
          AND coalesce(completed_at, requested_at) > now() - interval '1 day') AS replays_failed,
       (SELECT id::text
        FROM replays
        WHERE status = 'failed'
          AND coalesce(completed_at, requested_at) > now() - interval '1 day'
        ORDER BY coalesce(completed_at, requested_at) DESC
        LIMIT 1) AS newest_failed_replay,
       (SELECT count(*) FROM watcher_missing) AS events_missing,
       (SELECT min(position) FROM watcher_missing) AS first_missing
