-- The relay of slot $1 refused to go on and stopped, for the reason $2 (its error, as it
-- logged it with "relay stopped"): kept beside its lag report for the verdict until its
-- next report while streaming clears it.
INSERT INTO relay_lag_reports (slot_name, reported_at, refused)
VALUES ($1, now(), $2)
ON CONFLICT (slot_name) DO UPDATE
SET refused = excluded.refused,
    reported_at = excluded.reported_at
