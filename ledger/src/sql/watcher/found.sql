-- Events a record was read of: no longer missing.
DELETE FROM watcher_missing WHERE event_id = ANY ($1::uuid[])
