-- The mark that makes the next digest re-read every stream ($1), unless it is there.
INSERT INTO digest_dirty (stream) SELECT $1
WHERE NOT EXISTS (SELECT 1 FROM digest_dirty WHERE stream = $1)
