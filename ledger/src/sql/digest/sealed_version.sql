-- The version of stream $1 the digests sealed, if any.
SELECT version FROM digest_leaves WHERE stream = $1
