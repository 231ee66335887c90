-- The partitions tracked: topics $1, partitions $2, log starts counted from $3, resume
-- offsets $4, offsets read to $5.
INSERT INTO watcher_partitions (topic, partition, first, resume, read_to)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bigint[], $5::bigint[])
