-- With digests off: the marks no builder will consume ($1: the mark of every stream, kept).
DELETE FROM digest_dirty WHERE stream <> $1
