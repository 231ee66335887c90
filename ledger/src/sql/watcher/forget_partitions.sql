-- Before save_partitions.sql, in the same transaction: the partitions tracked are
-- replaced whole (a rescan or a deleted topic drops some).
DELETE FROM watcher_partitions
