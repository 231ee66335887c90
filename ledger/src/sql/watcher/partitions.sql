-- What the watcher tracks of each partition of the event topics, in the order it indexes
-- them.
SELECT topic, partition, first, resume, read_to
FROM watcher_partitions
ORDER BY topic, partition
