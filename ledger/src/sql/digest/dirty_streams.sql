-- The streams whose head moved since the last digest (or `*`: every stream).
SELECT DISTINCT stream FROM digest_dirty
