-- Every digest's hash, by seq (`ledger verify --digests` against the topic).
SELECT seq, hash FROM digests ORDER BY seq
