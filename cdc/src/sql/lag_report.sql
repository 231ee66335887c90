-- The relay's report of its lag (migration V18): slot $1's oldest transaction read and not
-- yet confirmed committed $2 microseconds after the Unix epoch (NULL: nothing waits), as of
-- now; a refusal it reported before no longer holds. One row per slot, overwritten.
INSERT INTO relay_lag_reports (slot_name, oldest_unconfirmed_commit_at, reported_at)
VALUES ($1, to_timestamp($2::bigint / 1e6), now())
ON CONFLICT (slot_name) DO UPDATE
SET oldest_unconfirmed_commit_at = excluded.oldest_unconfirmed_commit_at,
    reported_at = excluded.reported_at,
    refused = NULL
