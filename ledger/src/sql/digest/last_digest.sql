-- The newest digest, that the next one chains to and whose tree a builder's cache may hold.
SELECT seq, hash, root, event_count FROM digests ORDER BY seq DESC LIMIT 1
